package main_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/camunda"
	"github.com/nodeid/nodeid/internal/s3test"
)

// Issue 26.3: a Camunda broker released node 0 (empty body, its version in
// the metadata). nodeid waits until the object has been quiet for L + 1 s,
// and a task started meanwhile logs `no node id free, waiting`; status
// said `takeable now`. It must say when, and that it is Camunda's release.
func TestStatusSaysWhenACamundaReleaseIsTaken(t *testing.T) {
	srv := s3test.StartVersity(t)
	client := srv.Client(t)
	ctx := context.Background()
	c := newCluster(t, srv, 1)
	env := []string{"NODEID_PREFIX="} // Camunda's keys are at the root
	if err := camunda.Bootstrap(ctx, client, srv.Bucket, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := camunda.WriteReleased(ctx, client, srv.Bucket, 0, 2, true); err != nil {
		t.Fatal(err)
	}
	released := time.Now()

	code, stdout, stderr := c.runCmd(t, env, "status", "--json")
	if code != 0 {
		t.Fatalf("status: exit %d\n%s%s", code, stdout, stderr)
	}
	var rows []struct {
		NodeID int    `json:"nodeId"`
		State  string `json:"state"`
		Note   string `json:"note"`
	}
	if err := json.Unmarshal([]byte(stdout), &rows); err != nil || len(rows) != 1 {
		t.Fatalf("status --json: %v\n%s", err, stdout)
	}
	note := rows[0].Note
	t.Logf("node 0: %s: %s", rows[0].State, note)
	m := regexp.MustCompile(`^takeable in (\S+) \(Camunda release: nodeid waits L \+ 1 s after its last write, L = 2s\)$`).FindStringSubmatch(note)
	if rows[0].State != "released" || m == nil {
		t.Fatalf("node 0 after Camunda's release: %s, note %q; want released, takeable in T (Camunda release: nodeid waits L + 1 s ...)", rows[0].State, note)
	}
	in, err := time.ParseDuration(m[1])
	// Date and Last-Modified are whole seconds, each rounded its own way:
	// the estimate may be one second longer than L + 1 s.
	if err != nil || in <= 0 || in > 4*time.Second {
		t.Errorf("takeable in %q: want a duration in (0, L + 1 s + 1 s = 4s]", m[1])
	}
	table := c.status(t, "--prefix", "")
	if strings.Contains(table, "takeable now") || !strings.Contains(table, "Camunda release") {
		t.Errorf("status table:\n%s", table)
	}

	// nodeid's own bootstrap objects (the marker names their ETags) are
	// free at once, by the same rule.
	if code, stdout, stderr := c.runCmd(t, nil, "bootstrap", "--cluster-size", "1"); code != 0 {
		t.Fatalf("bootstrap: exit %d\n%s%s", code, stdout, stderr)
	}
	if out := c.status(t, "--json"); !strings.Contains(out, `"note": "takeable now"`) {
		t.Errorf("status of a cluster nodeid bootstrapped:\n%s", out)
	}

	// What a task does meanwhile: it waits, then takes the ID, not
	// gracefully, and not before the object was quiet for L.
	tk := c.start("spare", env, "run", "--", "sh", "-c", childScript)
	waitFor(t, 10*time.Second, "the task to wait", func() bool { return strings.Contains(tk.out.String(), "no node id free, waiting") })
	id, v, graceful := tk.identity(t, 20*time.Second)
	took := time.Since(released)
	t.Logf("taken as node %d v%d graceful=%v %v after the release", id, v, graceful, took.Round(time.Millisecond))
	if id != 0 || v != 3 || graceful {
		t.Errorf("took node %d v%d graceful=%v, want node 0 v3 not graceful", id, v, graceful)
	}
	if took < 2*time.Second {
		t.Errorf("taken %v after Camunda's release, before L = 2s", took)
	}
}
