package main_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
)

// Review r26c (invariant 5): "under the data root" is decided on the
// configured path's text (cleaned, against the data root as configured and
// with its own symlinks resolved). An output reached through an alias of
// the data root (the operator's symlink to it, or a bind mount) is taken
// for an operator's path and followed, symlinks included, so a symlink
// planted under the data root before the start leads the write out of it.
//
// Schedule: data root R (a real directory); the operator's /alias -> R
// (outside R); another tenant plants R/conf -> OUTSIDE; run starts with
// --template src:/alias/conf/broker.properties. Wanted: exit 2 (as for
// R/conf/broker.properties), or the file inside R; got: OUTSIDE written.
func TestReviewR26cOutputThroughAnAliasOfTheDataRootFollowsAPlantedSymlinkOut(t *testing.T) {
	c := newCluster(t, s3test.NewFake(t), 1)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(c.root, "conf")); err != nil {
		t.Fatal(err)
	}
	alias := filepath.Join(c.dir, "alias")
	if err := os.Symlink(c.root, alias); err != nil {
		t.Fatal(err)
	}
	tmpl := filepath.Join(c.dir, "a.tmpl")
	if err := os.WriteFile(tmpl, []byte("id={{.NodeID}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tk := c.start("node-0", []string{"NODEID_TEMPLATE=" + tmpl + ":" + filepath.Join(alias, "conf", "broker.properties"),
		"NODEID_PEERS_FILE=" + filepath.Join(alias, "conf", "peers.json")},
		"run", "--", "sh", "-c", childScript)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && tk.running() {
		if _, err := os.Stat(tk.report); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	entries, _ := os.ReadDir(outside)
	for _, e := range entries {
		t.Errorf("wrote %s, outside the data root %s, through %s (an alias of the data root) and the symlink %s planted under it",
			filepath.Join(outside, e.Name()), c.root, alias, filepath.Join(c.root, "conf"))
	}
	t.Logf("node-0 running=%v exit=%d; output:\n%s", tk.running(), tk.code, tk.out.String())
}

// Review r26c (invariant 5): the held directory is followed wherever it
// moves. Another tenant renames a directory under the data root that holds
// run's template destination and peers file to outside the data root (same
// file system) while the command runs; the next peer change writes both
// there.
func TestReviewR26cHeldDirectoryRenamedOutOfTheDataRootIsStillWritten(t *testing.T) {
	c := newCluster(t, s3test.NewFake(t), 2)
	conf := filepath.Join(c.root, "conf")
	if err := os.Mkdir(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir() // same file system as the data root (both in $TMPDIR)
	src := filepath.Join(c.dir, "peers.tmpl")
	if err := os.WriteFile(src, []byte("{{range .Peers}}{{.ID}}={{.Address}}\n{{end}}"), 0o644); err != nil {
		t.Fatal(err)
	}
	one := c.runTask("node-1", "NODEID_TEMPLATE="+src+":"+filepath.Join(conf, "broker.properties"),
		"NODEID_PEERS_FILE="+filepath.Join(conf, "peers.json"),
		"NODEID_ALLOWED_IDS=1", "NODEID_ADVERTISE_ADDRESS=10.0.0.1:9092")
	one.identity(t, 20*time.Second)
	moved := filepath.Join(outside, "moved")
	if err := os.Rename(conf, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(conf, 0o755); err != nil { // a fresh one at the path
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(moved, "broker.properties"))
	zero := c.runTask("node-0", "NODEID_ALLOWED_IDS=0", "NODEID_ADVERTISE_ADDRESS=10.0.0.2:9092")
	zero.identity(t, 20*time.Second)
	deadline := time.Now().Add(3 * peersBound)
	for time.Now().Before(deadline) && !strings.Contains(one.out.String(), "peers file updated") {
		time.Sleep(50 * time.Millisecond)
	}
	after, _ := os.ReadFile(filepath.Join(moved, "broker.properties"))
	if string(after) != string(before) {
		t.Errorf("the re-rendering wrote %s, outside the data root %s (the held directory was renamed there):\nbefore %q\nafter  %q",
			filepath.Join(moved, "broker.properties"), c.root, before, after)
	}
	if b, err := os.ReadFile(filepath.Join(conf, "broker.properties")); err == nil {
		t.Logf("at the configured path: %q", b)
	}
}

// Review r26c (invariant 5, bad input): run's default lease and peers
// files are claimed after the session started (claimDefaultLeaseFile), by
// walking $TMPDIR, and only then opened from the data root. With $TMPDIR
// under the data root (a read-only root file system leaves only the data
// volume writable) and a symlink out of the data root planted at it, run
// creates nodeid-<uid>/lease.lock outside the data root, logs, and only then
// refuses.
//
// Wanted: exit 2, one error line, nothing written outside the data root.
func TestReviewR26cDefaultLeaseFileUnderTheDataRootWritesOutsideBeforeTheRefusal(t *testing.T) {
	c := newCluster(t, s3test.NewFake(t), 1)
	outside := t.TempDir()
	tmp := filepath.Join(c.root, "tmp")
	if err := os.Symlink(outside, tmp); err != nil {
		t.Fatal(err)
	}
	tk := c.start("node-0", []string{"TMPDIR=" + tmp}, "run", "--", "sh", "-c", childScript)
	code := tk.wait(t, 20*time.Second)
	msg := tk.out.String()
	t.Logf("exit %d:\n%s", code, msg)
	var found []string
	_ = filepath.WalkDir(outside, func(p string, d os.DirEntry, err error) error {
		if err == nil && p != outside {
			found = append(found, p)
		}
		return nil
	})
	if len(found) > 0 {
		t.Errorf("wrote outside the data root through the symlink %s -> %s: %v", tmp, outside, found)
	}
	if code == 0 || code == 2 && len(strings.Split(strings.TrimRight(msg, "\n"), "\n")) != 1 {
		t.Errorf("exit %d, want 2 with one error line:\n%s", code, msg)
	}
	if l, err := c.repo().List(context.Background()); err != nil || len(l.Slots) != 0 {
		t.Errorf("a refused start wrote lease objects: %+v %v", l.Slots, err)
	}
}
