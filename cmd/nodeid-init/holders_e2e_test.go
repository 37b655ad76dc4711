package main_test

// Issue 23.10 and 23.11: what status, peers and templates say about other
// tasks' leases: only a live holder is held, and a task ID with shell syntax
// never reaches a template.

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// minuteLease is a lease of task at id, renewed for a minute, published at
// addr: live by every timing rule for the whole test.
func minuteLease(task string, id int, addr string) nodeid.Lease {
	return nodeid.Lease{TaskID: task, Instance: nodeid.NodeInstance{ID: id, Version: 1}, Expires: time.Now().Add(time.Minute),
		Duration: time.Minute, Nonce: task + "-nonce", Acquirable: true, Address: addr}
}

// A placeholder created by scale and a holder fenced by a scale-down and
// scale-up are "no-holder" in status and peers: status --check counts one
// of three held, and only the live holder's address is handed out.
func TestStatusAndPeersCountOnlyLiveHolders(t *testing.T) {
	for _, s := range []struct {
		name  string
		start func(testing.TB) *s3test.Server
	}{{"gofakes3", func(t testing.TB) *s3test.Server { return s3test.NewFake(t) }}, {"versitygw", s3test.StartVersity}} {
		t.Run(s.name, func(t *testing.T) {
			c := newCluster(t, s.start(t), 3)
			ctx := context.Background()
			repo := c.repo()
			for _, l := range []nodeid.Lease{
				minuteLease("live", 0, "10.0.0.1:9093"),
				minuteLease("recreated-by:nodeid-init-scale", 1, ""),
				minuteLease("fenced", 2, "10.0.0.3:9093"),
			} {
				if _, err := repo.Create(ctx, l); err != nil {
					t.Fatal(err)
				}
			}
			for _, size := range []int{2, 3} {
				if code, out, errOut := c.runCmd(t, nil, "scale", "--cluster-size", itoa(size), "--yes"); code != 0 {
					t.Fatalf("scale %d: exit %d\n%s%s", size, code, out, errOut)
				}
			}

			code, stdout, stderr := c.runCmd(t, nil, "status", "--check")
			if code != 1 || !strings.Contains(stderr, "1 of 3 node IDs held") {
				t.Errorf("status --check: exit %d, want 1 with \"1 of 3 node IDs held\"\n%s%s", code, stdout, stderr)
			}
			_, stdout, _ = c.runCmd(t, nil, "status", "--json")
			var rows []struct {
				NodeID  int    `json:"nodeId"`
				State   string `json:"state"`
				Address string `json:"address"`
			}
			if err := json.Unmarshal([]byte(stdout), &rows); err != nil {
				t.Fatalf("status --json: %v\n%s", err, stdout)
			}
			var got []string
			for _, r := range rows {
				got = append(got, itoa(r.NodeID)+" "+r.State+" "+r.Address)
			}
			if want := "0 held 10.0.0.1:9093,1 no-holder ,2 no-holder "; strings.Join(got, ",") != want {
				t.Errorf("status rows %q, want %q", strings.Join(got, ","), want)
			}

			peers := c.peersJSON(t)
			got = nil
			for _, p := range peers {
				got = append(got, itoa(p.ID)+" "+string(p.State)+" "+p.Address)
			}
			if want := "0 held 10.0.0.1:9093,1 no-holder ,2 no-holder "; strings.Join(got, ",") != want {
				t.Errorf("peers %q, want %q", strings.Join(got, ","), want)
			}
		})
	}
}

const shellTaskID = "t$(touch${IFS}PWNED)"

// A peer's lease names a task ID with shell syntax; a template renders the
// peers' task IDs with printf "%q" (double quotes) into an env file the
// child sources with sh. The peer is corrupt to the template, so nothing
// runs; status and peers show it as corrupt too.
func TestPeerTaskIDWithShellSyntaxNeverRunsInASourcedEnvFile(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 2)
	if code, out, errOut := c.runCmd(t, nil, "bootstrap", "--cluster-size", "2"); code != 0 {
		t.Fatalf("bootstrap: exit %d\n%s%s", code, out, errOut)
	}
	ctx := context.Background()
	rec, err := c.repo().Get(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.repo().Write(ctx, minuteLease(shellTaskID, 1, "10.0.0.2:9093"), rec.ETag); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	tmpl := filepath.Join(c.dir, "peers.env.tmpl")
	text := `{{range .Peers}}PEER_{{.ID}}_TASK={{printf "%q" .TaskID}}
PEER_{{.ID}}_TASK_Q={{shquote .TaskID}}
{{end}}`
	if err := os.WriteFile(tmpl, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	envFile := filepath.Join(c.dir, "peers.env")
	script := `cd "$WORK" && set -a && . "$PEERS_ENV" && echo "$NODE_ID $NODE_VERSION $NODE_PREVIOUS_GRACEFUL" > "$REPORT"; exec sleep 300`
	tk := c.start("t", []string{"NODEID_ALLOWED_IDS=0", "WORK=" + work, "PEERS_ENV=" + envFile},
		"run", "--template", tmpl+":"+envFile, "--", "sh", "-c", script)
	if id, _, _ := tk.identity(t, 20*time.Second); id != 0 {
		t.Fatalf("took node %d, want 0", id)
	}
	if _, err := os.Stat(filepath.Join(work, "PWNED")); err == nil {
		b, _ := os.ReadFile(envFile)
		t.Fatalf("sourcing the rendered env file ran the peer's task ID:\n%s", b)
	}
	if b, _ := os.ReadFile(envFile); strings.Contains(string(b), "touch") {
		t.Errorf("the peer's task ID was rendered:\n%s", b)
	}
	for _, p := range c.peersJSON(t) {
		if p.ID == 1 && (p.State != nodeid.PeerCorrupt || p.TaskID != "" || p.Address != "") {
			t.Errorf("peers shows %+v, want node 1 corrupt with nothing of it", p)
		}
	}
	if out := c.status(t); !strings.Contains(out, "corrupt") || strings.Contains(out, "1  held") {
		t.Errorf("status does not show node 1 as corrupt:\n%s", out)
	}
}

// A task ID with shell syntax is a configuration error: one line, exit 2,
// nothing written.
func TestTaskIDWithShellSyntaxIsRefused(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 1)
	envFile := filepath.Join(t.TempDir(), "node.env")
	for _, args := range [][]string{{"acquire"}, {"run", "--", "true"}} {
		tk := c.start(shellTaskID, []string{"NODEID_ENV_FILE=" + envFile}, args...)
		if code := tk.wait(t, 20*time.Second); code != 2 {
			t.Fatalf("%v: exit %d, want 2:\n%s", args, code, tk.out.String())
		}
		oneLineWith(t, args[0], tk.out.String(), "task id")
		if _, err := os.Stat(envFile); err == nil {
			t.Errorf("%v: env file written", args)
		}
		if rec, err := c.repo().Get(context.Background(), 0); err == nil && rec.Lease.Held() {
			t.Errorf("%v: lease taken: %+v", args, rec.Lease)
		}
	}
}
