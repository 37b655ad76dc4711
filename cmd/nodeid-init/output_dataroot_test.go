package main_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
)

// An output under the data root whose directory is, at the start, a
// symlink out of the data root (planted by another tenant) is a
// configuration error: exit 2, one line naming the path, nothing acquired,
// nothing written under the data root or outside it. The same symlink
// outside the data root is the operator's and is followed.
func TestAnOutputUnderTheDataRootThroughASymlinkOutOfItIsRefusedAtStart(t *testing.T) {
	c := newCluster(t, s3test.NewFake(t), 1)
	outside := t.TempDir()
	conf := filepath.Join(c.root, "conf")
	if err := os.Symlink(outside, conf); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..", filepath.Join(c.root, "up")); err != nil {
		t.Fatal(err)
	}
	tmpl := filepath.Join(c.dir, "a.tmpl")
	if err := os.WriteFile(tmpl, []byte("id={{.NodeID}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	in := func(name string) string { return filepath.Join(conf, name) }
	cases := []struct {
		name string
		args []string
	}{
		{"template destination", []string{"run", "--template", tmpl + ":" + in("broker.properties"), "--", "true"}},
		{"peers file", []string{"run", "--peers-file", in("peers.json"), "--", "true"}},
		{"lease file", []string{"run", "--lease-file", in("lease.json"), "--", "true"}},
		// A relative symlink to `..`: out of the data root as well.
		{"template destination", []string{"run", "--template", tmpl + ":" + filepath.Join(c.root, "up", filepath.Base(outside), "x"), "--", "true"}},
		{"env file", []string{"acquire", "--env-file", in("node.env"), "--handoff-file", filepath.Join(c.dir, "handoff.json")}},
		{"hand-off file", []string{"acquire", "--env-file", filepath.Join(c.dir, "node.env"), "--handoff-file", in("handoff.json")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(binary, tc.args...)
			cmd.Env = append(append([]string{}, c.env...), "NODEID_TASK_ID=planted")
			var stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stderr, &stderr
			done := make(chan error, 1)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { done <- cmd.Wait() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("still running after 20 s:\n%s", stderr.String())
			}
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			}
			msg := stderr.String()
			if code != 2 {
				t.Errorf("exit code %d, want 2:\n%s", code, msg)
			}
			if lines := strings.Split(strings.TrimRight(msg, "\n"), "\n"); len(lines) != 1 ||
				!strings.Contains(msg, tc.name) || !strings.Contains(msg, "data root") {
				t.Errorf("stderr is not one line naming the %s and the data root:\n%s", tc.name, msg)
			}
		})
	}
	if l, err := c.repo().List(context.Background()); err != nil || len(l.Slots) != 0 {
		t.Errorf("a refused start wrote lease objects: %+v %v", l.Slots, err)
	}
	if entries, err := os.ReadDir(c.root); err != nil || len(entries) != 2 {
		t.Errorf("a refused start wrote to the data root: %v %v", entries, err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("a refused start wrote outside the data root, through the symlink: %v", entries)
	}

	// Outside the data root, a symlink on the configured path is followed.
	link := filepath.Join(c.dir, "conf")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	tk := c.runTask("node-0", "NODEID_TEMPLATE="+tmpl+":"+filepath.Join(link, "broker.properties"))
	tk.identity(t, 20*time.Second)
	if b, err := os.ReadFile(filepath.Join(outside, "broker.properties")); err != nil || string(b) != "id=0\n" {
		t.Errorf("template through the operator's symlink outside the data root: %q %v", b, err)
	}
}

// Under the data root no symlink is followed, not even one that stays
// inside it (it may lead into another node's live data directory), and no
// output is written into a node-N directory (datadir's). This replaces the
// earlier rule that followed a symlink staying inside the data root: at
// start it is a configuration error (exit 2, one line); planted later, the
// write is refused and logged, as for a final name that became a symlink.
func TestAnOutputUnderTheDataRootThroughASymlinkInsideItIsRefused(t *testing.T) {
	c := newCluster(t, s3test.NewFake(t), 2)
	real := filepath.Join(c.root, "conf-v2")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("conf-v2", filepath.Join(c.root, "conf")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(c.root, "node-7"), 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(c.dir, "peers.tmpl")
	if err := os.WriteFile(src, []byte("{{range .Peers}}{{.ID}}={{.Address}}\n{{end}}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dst := range []string{filepath.Join(c.root, "conf", "broker.properties"), filepath.Join(c.root, "node-7", "broker.properties")} {
		cmd := exec.Command(binary, "run", "--template", src+":"+dst, "--", "true")
		cmd.Env = append(append([]string{}, c.env...), "NODEID_TASK_ID=refused")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("%s: %v, want exit 2:\n%s", dst, err, out)
		}
		if lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n"); len(lines) != 1 || !strings.Contains(string(out), "data root") {
			t.Errorf("%s: stderr is not one line naming the data root:\n%s", dst, out)
		}
	}
	if l, err := c.repo().List(context.Background()); err != nil || len(l.Slots) != 0 {
		t.Errorf("a refused start wrote lease objects: %+v %v", l.Slots, err)
	}

	// Planted while the command runs: a real directory at start, swapped
	// for a symlink that stays inside the data root.
	conf := filepath.Join(c.root, "conf2")
	if err := os.Mkdir(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(conf, "broker.properties")
	one := c.runTask("node-1", "NODEID_TEMPLATE="+src+":"+dst, "NODEID_PEERS_FILE=",
		"NODEID_ALLOWED_IDS=1", "NODEID_ADVERTISE_ADDRESS=10.0.0.1:9092")
	one.identity(t, 20*time.Second)
	if err := os.Rename(conf, conf+".orig"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("conf-v2", conf); err != nil {
		t.Fatal(err)
	}
	zero := c.runTask("node-0", "NODEID_ALLOWED_IDS=0", "NODEID_ADVERTISE_ADDRESS=10.0.0.2:9092")
	zero.identity(t, 20*time.Second)
	deadline := time.Now().Add(3 * peersBound)
	for time.Now().Before(deadline) && !strings.Contains(one.out.String(), "cannot render the templates again") {
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(one.out.String(), "symlink under the data root") {
		t.Errorf("the re-rendering through a symlink planted inside the data root was not refused and logged:\n%s", one.out.String())
	}
	if entries, _ := os.ReadDir(real); len(entries) != 0 {
		t.Errorf("wrote %v through a symlink under the data root", entries)
	}
	if !one.running() {
		t.Fatalf("node-1 exited (%d)", one.code)
	}
}
