package camunda

import (
	"errors"
	"strings"
	"testing"
)

// held is a well-formed body of a lease held by t1 at version 2.
const held = `{"taskId":"t1","timestamp":1000,"nodeInstance":{"id":0,"version":2},"knownVersionMappings":{"mappingsByNodeId":{"0":2,"1":3}}}`

var metaT1 = map[string]string{"taskid": "t1", "version": "2", "acquirable": "true"}

// lease returns the held body with the member value of nodeInstance.version
// (or any other fragment) replaced.
func lease(timestamp, version, id string) string {
	return `{"taskId":"t1","timestamp":` + timestamp + `,"nodeInstance":{"id":` + id + `,"version":` + version + `},"knownVersionMappings":{}}`
}

// padNull is the literal null padded to 512 bytes with JSON whitespace.
func padNull() string {
	s := " \t\nnull"
	for len(s) < 512 {
		s += " \n\t\r"
	}
	return s[:512]
}

type leaseCase struct {
	name string
	body string
	meta map[string]string
	want string // the one-line result, or "ERROR"
}

// leaseCases is the table both readers must agree on. want pins the
// expected outcome; the Jackson test shows the real parser agrees with it.
var leaseCases = []leaseCase{
	{"held", held, metaT1, `Initialized task="t1" node=0 v2 ts=1000 acquirable=true known={0:2,1:3}`},
	{"held, not acquirable", held, map[string]string{"taskid": "t1", "version": "2", "acquirable": "False"}, `Initialized task="t1" node=0 v2 ts=1000 acquirable=false known={0:2,1:3}`},
	{"empty, no metadata (bootstrap)", "", nil, "Uninitialized v0 acquirable=true"},
	{"empty, released", "", map[string]string{"taskid": "", "version": "7", "acquirable": "true"}, "Uninitialized v7 acquirable=true"},
	{"empty, scaled down", "", map[string]string{"taskid": "", "version": "7", "acquirable": "yes"}, "Uninitialized v7 acquirable=false"},
	{"empty, metadata without version", "", map[string]string{"taskid": "x"}, "ERROR"},
	{"empty, version with a space", "", map[string]string{"version": " 7"}, "ERROR"},
	{"empty, version +7", "", map[string]string{"version": "+7"}, "Uninitialized v7 acquirable=true"},
	{"empty, negative version", "", map[string]string{"version": "-1"}, "ERROR"},
	{"empty, Arabic-Indic version", "", map[string]string{"version": "٣"}, "Uninitialized v3 acquirable=true"},
	{"null", "null", metaT1, "Uninitialized v2 acquirable=true"},
	{"null in whitespace", "  null \n", nil, "Uninitialized v0 acquirable=true"},
	{"null padded to 512 bytes", padNull(), nil, "Uninitialized v0 acquirable=true"},
	{"null with BOM", "\xef\xbb\xbfnull", nil, "Uninitialized v0 acquirable=true"},
	{"null then garbage", "null x\xff", nil, "Uninitialized v0 acquirable=true"},
	{"whitespace only", "   ", nil, "ERROR"},
	{"nul", "nul", nil, "ERROR"},
	{"unknown field", strings.TrimSuffix(held, "}") + `,"x":1}`, metaT1, "ERROR"},
	{"unknown nested field", lease("1", "2", `0,"x":1`), metaT1, "ERROR"},
	{"trailing whitespace", held + " \n\t", metaT1, `Initialized task="t1" node=0 v2 ts=1000 acquirable=true known={0:2,1:3}`},
	{"trailing garbage", held + " garbage", metaT1, `Initialized task="t1" node=0 v2 ts=1000 acquirable=true known={0:2,1:3}`},
	{"no metadata", held, nil, "ERROR"},
	{"taskid mismatch", held, map[string]string{"taskid": "t2", "version": "2"}, "ERROR"},
	{"version mismatch", held, map[string]string{"taskid": "t1", "version": "3"}, "ERROR"},
	{"metadata without taskid", held, map[string]string{"version": "2"}, "ERROR"},
	{"extra metadata ignored", held, map[string]string{"taskid": "t1", "version": "2", "expiry": "x"}, `Initialized task="t1" node=0 v2 ts=1000 acquirable=true known={0:2,1:3}`},
	{"array", "[]", nil, "ERROR"},
	{"string", `""`, nil, "ERROR"},
	{"empty object", "{}", metaT1, "ERROR"},
	{"empty taskId", `{"taskId":"","timestamp":1,"nodeInstance":{"id":0,"version":2},"knownVersionMappings":{}}`, metaT1, "ERROR"},
	{"numeric taskId", `{"taskId":12.50,"timestamp":1,"nodeInstance":{"id":0,"version":2},"knownVersionMappings":{}}`, map[string]string{"taskid": "12.50", "version": "2"}, `Initialized task="12.50" node=0 v2 ts=1 acquirable=true known={null}`},
	{"boolean taskId", `{"taskId":true,"timestamp":1,"nodeInstance":{"id":0,"version":2},"knownVersionMappings":{}}`, map[string]string{"taskid": "true", "version": "2"}, `Initialized task="true" node=0 v2 ts=1 acquirable=true known={null}`},
	{"object taskId", `{"taskId":{},"timestamp":1,"nodeInstance":{"id":0,"version":2},"knownVersionMappings":{}}`, metaT1, "ERROR"},
	{"missing timestamp", `{"taskId":"t1","nodeInstance":{"id":0,"version":2},"knownVersionMappings":{}}`, metaT1, `Initialized task="t1" node=0 v2 ts=0 acquirable=true known={null}`},
	{"string timestamp", lease(`" 12 "`, "2", "0"), metaT1, `Initialized task="t1" node=0 v2 ts=12 acquirable=true known={null}`},
	{"blank timestamp", lease(`"  "`, "2", "0"), metaT1, `Initialized task="t1" node=0 v2 ts=0 acquirable=true known={null}`},
	{"textual null timestamp", lease(`"null"`, "2", "0"), metaT1, `Initialized task="t1" node=0 v2 ts=0 acquirable=true known={null}`},
	{"float timestamp", lease("1000.7", "2", "0"), metaT1, `Initialized task="t1" node=0 v2 ts=1000 acquirable=true known={null}`},
	{"exponent timestamp", lease("1e3", "2", "0"), metaT1, `Initialized task="t1" node=0 v2 ts=1000 acquirable=true known={null}`},
	{"2^63 as a double", lease("9.2233720368547758E18", "2", "0"), metaT1, `Initialized task="t1" node=0 v2 ts=9223372036854775807 acquirable=true known={null}`},
	{"timestamp overflow", lease("9223372036854775808", "2", "0"), metaT1, "ERROR"},
	{"float timestamp overflow", lease("1e30", "2", "0"), metaT1, "ERROR"},
	{"boolean timestamp", lease("true", "2", "0"), metaT1, "ERROR"},
	{"string timestamp 1.5", lease(`"1.5"`, "2", "0"), metaT1, "ERROR"},
	{"float version", lease("1", "2.0", "0"), metaT1, "ERROR"},
	{"string version", lease("1", `" +2 "`, "0"), metaT1, `Initialized task="t1" node=0 v2 ts=1 acquirable=true known={null}`},
	{"blank version", lease("1", `"\t"`, "0"), metaT1, "ERROR"},
	{"textual null version", lease("1", `"null"`, "0"), metaT1, "ERROR"},
	{"null version", lease("1", "null", "0"), metaT1, "ERROR"},
	{"object version", lease("1", `{"version":2}`, "0"), metaT1, "ERROR"},
	{"negative id", lease("1", "2", "-1"), metaT1, "ERROR"},
	{"float id", lease("1", "2", "1.9"), metaT1, `Initialized task="t1" node=1 v2 ts=1 acquirable=true known={null}`},
	{"id overflow", lease("1", "2", "2147483648"), metaT1, "ERROR"},
	{"empty string id", lease("1", "2", `""`), metaT1, `Initialized task="t1" node=0 v2 ts=1 acquirable=true known={null}`},
	{"duplicate before complete", `{"taskId":"t2","taskId":"t1","timestamp":1,"nodeInstance":{"id":0,"version":2},"knownVersionMappings":{}}`, metaT1, `Initialized task="t1" node=0 v2 ts=1 acquirable=true known={null}`},
	{"duplicate after complete", `{"taskId":"t1","timestamp":1,"nodeInstance":{"id":0,"version":2},"knownVersionMappings":{},"taskId":"t1"}`, metaT1, "ERROR"},
	{"null nodeInstance", `{"taskId":"t1","timestamp":1,"nodeInstance":null,"knownVersionMappings":{}}`, metaT1, "ERROR"},
	{"null knownVersionMappings", `{"taskId":"t1","timestamp":1,"nodeInstance":{"id":0,"version":2},"knownVersionMappings":null}`, metaT1, "ERROR"},
	{"string knownVersionMappings", `{"taskId":"t1","timestamp":1,"nodeInstance":{"id":0,"version":2},"knownVersionMappings":""}`, metaT1, "ERROR"},
	{"map keys", `{"taskId":"t1","timestamp":1,"nodeInstance":{"id":0,"version":2},"knownVersionMappings":{"mappingsByNodeId":{"+1":null,"01":4,"2":null,"٣":5}}}`, metaT1, `Initialized task="t1" node=0 v2 ts=1 acquirable=true known={1:4,2:null,3:5}`},
	{"bad map key", `{"taskId":"t1","timestamp":1,"nodeInstance":{"id":0,"version":2},"knownVersionMappings":{"mappingsByNodeId":{" 1":1}}}`, metaT1, "ERROR"},
	{"negative map value", `{"taskId":"t1","timestamp":1,"nodeInstance":{"id":0,"version":2},"knownVersionMappings":{"mappingsByNodeId":{"1":-1}}}`, metaT1, "ERROR"},
	{"invalid UTF-8", "{\"taskId\":\"t\xff1\",\"timestamp\":1,\"nodeInstance\":{\"id\":0,\"version\":2},\"knownVersionMappings\":{}}", metaT1, "ERROR"},
}

func result(s string, err error) string {
	if err != nil {
		return "ERROR"
	}
	return s
}

func TestReadLease(t *testing.T) {
	for _, c := range leaseCases {
		s, err := ReadLease([]byte(c.body), c.meta)
		if err != nil && !errors.Is(err, ErrUnreadable) {
			t.Errorf("%s: error %v does not wrap ErrUnreadable", c.name, err)
		}
		if got := result(s.String(), err); got != c.want {
			t.Errorf("%s: ReadLease = %q (err %v), want %q", c.name, got, err, c.want)
		}
	}
}

type markerCase struct {
	name, body, want string
}

var markerCases = []markerCase{
	{"first", `{"initializedAt":5,"version":3,"initializedFrom":null}`, "Dir at=5 v3 from=null"},
	{"copied", `{"initializedAt":5,"version":3,"initializedFrom":2}`, "Dir at=5 v3 from=2"},
	{"no initializedFrom", `{"initializedAt":5,"version":3}`, "Dir at=5 v3 from=null"},
	{"no version", `{"initializedAt":5,"initializedFrom":2}`, "ERROR"},
	{"negative initializedAt", `{"initializedAt":-1,"version":3}`, "ERROR"},
	{"negative initializedFrom", `{"initializedAt":1,"version":3,"initializedFrom":-1}`, "ERROR"},
	{"unknown field", `{"initializedAt":5,"version":3,"x":1}`, "ERROR"},
	{"null", " null ", "Dir null"},
	{"empty", "", "ERROR"},
	{"trailing newline", "{\"initializedAt\":5,\"version\":3,\"initializedFrom\":null}\n", "Dir at=5 v3 from=null"},
}

func TestReadDirectoryMarker(t *testing.T) {
	for _, c := range markerCases {
		d, err := ReadDirectoryMarker([]byte(c.body))
		if got := result(d.String(), err); got != c.want {
			t.Errorf("%s: ReadDirectoryMarker = %q (err %v), want %q", c.name, got, err, c.want)
		}
	}
}

// TestJacksonAgrees runs every case through the real Jackson parser: the
// Go model is only worth something if Jackson reads the same.
func TestJacksonAgrees(t *testing.T) {
	var objs []Object
	for _, c := range leaseCases {
		objs = append(objs, LeaseObject([]byte(c.body), c.meta))
	}
	for _, c := range markerCases {
		objs = append(objs, MarkerObject([]byte(c.body)))
	}
	lines := JacksonCheck(t, objs...)
	want := func(i int) (string, string) {
		if i < len(leaseCases) {
			return leaseCases[i].name, leaseCases[i].want
		}
		c := markerCases[i-len(leaseCases)]
		return "marker " + c.name, c.want
	}
	for i, line := range lines {
		name, w := want(i)
		got := line
		if strings.HasPrefix(line, "ERROR") {
			got = "ERROR"
		}
		if got != w {
			t.Errorf("%s: Jackson read %q, the model expects %q", name, line, w)
		}
	}
}
