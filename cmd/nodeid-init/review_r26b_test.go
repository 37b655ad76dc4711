package main_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
)

// Review r26b (invariant 5): the outputs' directories are held from the
// start, "following what the operator configured (symlinks included)"
// (heldfile.go). Under a shared data root, what is there at the start is
// not the operator's: the root outlives every task, and another tenant
// (or a previous task's broker) swaps a directory on the configured path
// for a symlink out of the root before this task starts. The template and
// the peers file are then written, and re-written at every peer change,
// outside the data root.
func TestOutputsUnderTheDataRootDoNotFollowASymlinkPlantedBeforeStart(t *testing.T) {
	c := newCluster(t, s3test.NewFake(t), 2)
	outside := t.TempDir() // not under the data root
	conf := filepath.Join(c.root, "conf")
	// Planted before the task starts (the operator's deployment made conf a
	// directory; a tenant replaced it).
	if err := os.Symlink(outside, conf); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(c.dir, "peers.tmpl")
	if err := os.WriteFile(src, []byte("{{range .Peers}}{{.ID}}={{.Address}}\n{{end}}"), 0o644); err != nil {
		t.Fatal(err)
	}
	one := c.runTask("node-1", "NODEID_TEMPLATE="+src+":"+filepath.Join(conf, "broker.properties"),
		"NODEID_PEERS_FILE="+filepath.Join(conf, "peers.json"),
		"NODEID_ALLOWED_IDS=1", "NODEID_ADVERTISE_ADDRESS=10.0.0.1:9092")
	// Either refused at the start, or running without writing outside.
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && one.running() {
		if _, err := os.Stat(one.report); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	entries, _ := os.ReadDir(outside)
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(outside, e.Name()))
		t.Errorf("wrote %s, outside the data root %s, through the symlink %s planted under it before the start:\n%s",
			filepath.Join(outside, e.Name()), c.root, conf, b)
	}
}
