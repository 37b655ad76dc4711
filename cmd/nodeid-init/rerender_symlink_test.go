package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
)

// Review r26 (invariant 5): a template destination under the shared data
// root is rendered again whenever the peers table changes, for the whole
// tenure. Its directory is a path under the data root, which nothing
// trusts: another tenant swaps it for a symlink while the command runs, and
// the re-rendering follows it, writing (and renaming over) a file outside
// the data root.
func TestRerenderDoesNotFollowASymlinkSwappedUnderTheDataRoot(t *testing.T) {
	c := newCluster(t, s3test.NewFake(t), 2)
	conf := filepath.Join(c.root, "conf")
	if err := os.Mkdir(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir() // not under the data root
	src := filepath.Join(c.dir, "peers.tmpl")
	if err := os.WriteFile(src, []byte("{{range .Peers}}{{.ID}}={{.Address}}\n{{end}}"), 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(conf, "broker.properties")
	one := c.runTask("node-1", "NODEID_TEMPLATE="+src+":"+dst, "NODEID_PEERS_FILE=",
		"NODEID_ALLOWED_IDS=1", "NODEID_ADVERTISE_ADDRESS=10.0.0.1:9092")
	one.identity(t, 20*time.Second)
	if b, err := os.ReadFile(dst); err != nil || !strings.Contains(string(b), "1=10.0.0.1:9092") {
		t.Fatalf("first rendering: %q, %v", b, err)
	}

	// Planted while the command runs: conf is now a symlink out of the root.
	if err := os.Rename(conf, conf+".orig"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, conf); err != nil {
		t.Fatal(err)
	}

	// A peer change: node 0 gets a holder, so node 1 renders again.
	zero := c.runTask("node-0", "NODEID_ALLOWED_IDS=0", "NODEID_ADVERTISE_ADDRESS=10.0.0.2:9092")
	zero.identity(t, 20*time.Second)
	deadline := time.Now().Add(3 * peersBound)
	for time.Now().Before(deadline) && !strings.Contains(one.out.String(), "template rendered again") &&
		!strings.Contains(one.out.String(), "cannot render the templates again") {
		time.Sleep(50 * time.Millisecond)
	}
	entries, _ := os.ReadDir(outside)
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(outside, e.Name()))
		t.Errorf("the re-rendering wrote %s, outside the data root %s, through the symlink %s planted under it:\n%s",
			filepath.Join(outside, e.Name()), c.root, conf, b)
	}
	if !one.running() {
		t.Fatalf("node-1 exited (%d)", one.code)
	}
}
