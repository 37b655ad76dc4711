package main_test

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// goDuration matches a Go duration string ("280.813334ms", "1m30s"): JSON
// logs carry durations as numbers of seconds, never so.
var goDuration = regexp.MustCompile(`^-?[0-9.]+(ns|us|µs|ms|s|m|h)([0-9.]+(ns|us|µs|ms|s|m|h))*$`)

// jsonType is the JSON type of a decoded value.
func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "bool"
	case float64:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// A realistic run in JSON: a holder acquires and renews (at info), a spare
// waits (at debug), the holder releases on SIGTERM, the spare takes over
// from the released version and later loses its lease to an overwrite.
// Every key keeps one JSON type across all lines of both tasks, no value is
// a Go duration string, every *_seconds key is a number, debug shows the
// decisions and the renewals, and info shows neither.
func TestJSONLogKeysKeepOneTypeAcrossARun(t *testing.T) {
	srv := s3test.NewFake(t)
	c := newCluster(t, srv, 1)
	c.env = append(c.env, "NODEID_LOG_FORMAT=json")

	holder := c.runTask("holder", "NODEID_LOG_LEVEL=info")
	holder.identity(t, 20*time.Second)
	spare := c.runTask("spare", "NODEID_LOG_LEVEL=debug")
	waitFor(t, 20*time.Second, "the spare to wait", func() bool { return strings.Contains(spare.out.String(), "no node id free, waiting") })
	time.Sleep(1500 * time.Millisecond) // a few renewals of the holder, a few polls of the spare
	if err := holder.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := holder.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("holder exited %d after SIGTERM, want 0", code)
	}
	id, v, _ := spare.identity(t, 10*time.Second)
	time.Sleep(800 * time.Millisecond) // a renewal of the spare (every 500 ms)
	body := fmt.Sprintf(`{"taskId":"intruder","timestamp":%d,"nodeInstance":{"id":%d,"version":%d},"knownVersionMappings":{"mappingsByNodeId":{}}}`,
		time.Now().Add(time.Hour).UnixMilli(), id, v)
	putObject(t, srv, "e2e/"+nodeid.LeaseKey("", id), body, map[string]string{"taskid": "intruder", "version": itoa(v), "acquirable": "true"})
	if code := spare.wait(t, 10*time.Second); code != 3 {
		t.Fatalf("spare exited %d after the overwrite, want 3", code)
	}

	holderRecs, spareRecs := jsonLines(t, holder.out.String()), jsonLines(t, spare.out.String())
	msgs := map[string]int{}
	for _, rec := range spareRecs {
		msgs[rec["msg"].(string)]++
	}
	for _, want := range []string{"acquired node id", "released node id", "no node id free, waiting",
		"prepared", "lease lost", "listing read", "candidate judged", "taking node id", "renewal sent", "renewal landed"} {
		if msgs[want] == 0 && !strings.Contains(holder.out.String(), `"msg":"`+want+`"`) {
			t.Errorf("no %q line in the run", want)
		}
	}
	for _, rec := range holderRecs {
		switch rec["msg"] {
		case "renewal sent", "renewal landed", "listing read", "candidate judged":
			t.Errorf("a debug line at --log-level info: %v", rec)
		}
	}
	judged := false
	for _, rec := range spareRecs {
		if rec["msg"] == "candidate judged" && rec["free"] == true && rec["reason"] == "released by its holder" {
			judged = true
		}
	}
	if !judged {
		t.Errorf("the spare's debug lines do not say it judged the released ID free because it was released:\n%s", spare.out.String())
	}

	types := map[string]map[string][]string{} // key -> type -> messages
	for _, rec := range append(holderRecs, spareRecs...) {
		for k, val := range rec {
			typ := jsonType(val)
			if types[k] == nil {
				types[k] = map[string][]string{}
			}
			types[k][typ] = append(types[k][typ], fmt.Sprint(rec["msg"]))
			if s, ok := val.(string); ok && goDuration.MatchString(s) {
				t.Errorf("%s=%q in %q: a duration as a string", k, s, rec["msg"])
			}
			if strings.HasSuffix(k, "_seconds") && typ != "number" {
				t.Errorf("%s=%v in %q: not a number", k, val, rec["msg"])
			}
		}
	}
	keys := make([]string, 0, len(types))
	for k := range types {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if len(types[k]) > 1 {
			t.Errorf("key %q has %d types: %v", k, len(types[k]), types[k])
		}
	}
	if _, ok := types["from_version"]["number"]; !ok {
		t.Errorf("no from_version number (the takeover prepared from v1): %v", types["from_version"])
	}
}
