package nodeid

import (
	"bytes"
	"testing"
)

// FuzzDecodeLease: whatever an object holds, parsing never panics, and what
// parses encodes back to the same lease.
func FuzzDecodeLease(f *testing.F) {
	f.Add(1, []byte(`{"taskId":"t","timestamp":1,"nodeInstance":{"id":1,"version":2},"knownVersionMappings":{"mappingsByNodeId":{"0":1}},"nonce":"ab","leaseDurationMs":15000}`), "t", "2", "true")
	f.Add(0, []byte{}, "", "0", "true")
	f.Add(3, []byte(`{"taskId":"abc","timestamp":1764504000000,"nodeInstance":{"id":3,"version":2},"knownVersionMappings":{"mappingsByNodeId":{}}}`), "abc", "2", "")
	f.Add(2, []byte(`{"taskId": "x", "nodeInst`), "x", "3", "false")
	f.Add(1, []byte(`null`), "", "-1", "maybe")
	f.Fuzz(func(t *testing.T, id int, body []byte, taskID, version, acquirable string) {
		if id < 0 {
			id = -id
		}
		meta := map[string]string{MetaTaskID: taskID, MetaVersion: version}
		if acquirable != "" {
			meta[MetaAcquirable] = acquirable
		}
		l, err := DecodeLease(id, body, meta)
		if err != nil {
			return
		}
		if l.Instance.ID != id || l.Instance.Version < 0 || (l.Held() && l.Instance.Version < 1) {
			t.Fatalf("accepted an impossible lease %+v", l)
		}
		b2, m2 := l.Encode()
		l2, err := DecodeLease(id, b2, m2)
		if err != nil {
			t.Fatalf("re-encoded lease does not parse: %v\n%s", err, b2)
		}
		b3, _ := l2.Encode()
		if !bytes.Equal(b2, b3) || l2.TaskID != l.TaskID || l2.Instance != l.Instance || l2.Acquirable != l.Acquirable {
			t.Fatalf("round trip changed the lease:\n%s\n%s", b2, b3)
		}
	})
}

// FuzzParseLeaseKey: a key parses only in its canonical form.
func FuzzParseLeaseKey(f *testing.F) {
	for _, k := range []string{"p/0.json", "p/12.json", "p/012.json", "p/-1.json", "p/nodeid-probe-3.json", "p/sub/1.json", "1.json"} {
		f.Add("p/", k)
	}
	f.Add("", "7.json")
	f.Fuzz(func(t *testing.T, prefix, key string) {
		id, ok := ParseLeaseKey(prefix, key)
		if !ok {
			return
		}
		if id < 0 || LeaseKey(prefix, id) != key {
			t.Fatalf("ParseLeaseKey(%q, %q) = %d, but LeaseKey gives %q", prefix, key, id, LeaseKey(prefix, id))
		}
	})
}

// FuzzVersionMappings: the wire form of mappings parses without panics and
// round-trips.
func FuzzVersionMappings(f *testing.F) {
	f.Add([]byte(`{"mappingsByNodeId":{"0":1,"2":7}}`))
	f.Add([]byte(`{"mappingsByNodeId":{"01":1}}`))
	f.Add([]byte(`{"mappingsByNodeId":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m VersionMappings
		if err := m.UnmarshalJSON(b); err != nil {
			return
		}
		out, err := m.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var m2 VersionMappings
		if err := m2.UnmarshalJSON(out); err != nil || len(m2) != len(m) {
			t.Fatalf("round trip: %v %v", m2, err)
		}
	})
}
