package main_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
)

// Review r26d (invariant 5): underDataRoot judges an output to lie under
// the data root only when one of its directory's prefixes IS the data root
// (its dev+ino). The operator's symlink to a directory INSIDE the data
// root (/etc/broker -> R/conf, as common as one to R itself) has no such
// prefix: the output is taken for an operator's path, its directory opened
// at start following every symlink, the tenant's included, so a symlink
// planted under the data root leads the write out of it.
//
// Schedule: data root R; a real directory R/conf; the operator's
// /alias -> R/conf (outside R); another tenant plants R/conf/sub -> OUTSIDE;
// run starts with --template src:/alias/sub/broker.properties and
// --peers-file /alias/sub/peers.json. Wanted: exit 2 (as for
// R/conf/sub/broker.properties), or nothing written outside R; got:
// OUTSIDE written.
func TestReviewR26dOutputThroughASymlinkToADirectoryInsideTheDataRootFollowsAPlantedSymlinkOut(t *testing.T) {
	c := newCluster(t, s3test.NewFake(t), 1)
	outside := t.TempDir()
	conf := filepath.Join(c.root, "conf")
	if err := os.Mkdir(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(conf, "sub")); err != nil {
		t.Fatal(err)
	}
	alias := filepath.Join(c.dir, "alias")
	if err := os.Symlink(conf, alias); err != nil {
		t.Fatal(err)
	}
	tmpl := filepath.Join(c.dir, "a.tmpl")
	if err := os.WriteFile(tmpl, []byte("id={{.NodeID}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tk := c.start("node-0", []string{"NODEID_TEMPLATE=" + tmpl + ":" + filepath.Join(alias, "sub", "broker.properties"),
		"NODEID_PEERS_FILE=" + filepath.Join(alias, "sub", "peers.json")},
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
		t.Errorf("wrote %s, outside the data root %s, through %s (the operator's symlink to %s inside the data root) and the symlink %s planted under it",
			filepath.Join(outside, e.Name()), c.root, alias, conf, filepath.Join(conf, "sub"))
	}
	t.Logf("node-0 running=%v exit=%d; output:\n%s", tk.running(), tk.code, tk.out.String())
}

// Review r26d (invariant 5), the same gap for $TMPDIR (checkTempDirPlacement
// and tempRoot use underDataRoot): TMPDIR=/alias/sub with the operator's
// /alias -> R/conf and the tenant's R/conf/sub -> OUTSIDE. The default
// lease file's directory nodeid-<uid>, lease.lock, the lease file and the
// peers file are created in OUTSIDE.
func TestReviewR26dTempDirThroughASymlinkToADirectoryInsideTheDataRootFollowsAPlantedSymlinkOut(t *testing.T) {
	c := newCluster(t, s3test.NewFake(t), 1)
	outside := t.TempDir()
	conf := filepath.Join(c.root, "conf")
	if err := os.Mkdir(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(conf, "sub")); err != nil {
		t.Fatal(err)
	}
	alias := filepath.Join(c.dir, "alias")
	if err := os.Symlink(conf, alias); err != nil {
		t.Fatal(err)
	}
	tk := c.start("node-0", []string{"TMPDIR=" + filepath.Join(alias, "sub")}, "run", "--", "sh", "-c", childScript)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && tk.running() {
		if _, err := os.Stat(tk.report); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	var written []string
	_ = filepath.WalkDir(outside, func(p string, _ os.DirEntry, _ error) error {
		if p != outside {
			written = append(written, p)
		}
		return nil
	})
	if len(written) > 0 {
		t.Errorf("created %v, outside the data root %s, through $TMPDIR %s (the operator's symlink to %s inside the data root) and the symlink planted there",
			written, c.root, filepath.Join(alias, "sub"), conf)
	}
	t.Logf("node-0 running=%v exit=%d; output:\n%s", tk.running(), tk.code, tk.out.String())
}

// Review r26d (invariants 3/5): an output under the data root is resolved
// inside the data root's os.Root at each write, so a symlink that stays
// inside it is followed, into another node's live version directory too.
// Node-0's template then replaces (rename) a file in node-1's data
// directory while node-1's broker runs on it, and the next holder of
// node 1 builds its directory from it.
//
// Schedule: cluster of 2; task B holds node X at version V and runs on
// R/node-X/vV; another tenant plants R/conf -> node-X/vV; task A starts with
// --template src:R/conf/meta.properties. Wanted: refused (exit 2), or
// nothing written in node-X/vV; got: A's file there.
func TestReviewR26dOutputUnderTheDataRootFollowsASymlinkIntoAnotherNodesLiveDataDirectory(t *testing.T) {
	c := newCluster(t, s3test.NewFake(t), 2)
	b := c.start("task-b", []string{"NODEID_LEASE_FILE=" + filepath.Join(c.dir, "b.json")}, "run", "--", "sh", "-c", childScript)
	t.Cleanup(func() { _ = b.cmd.Process.Kill() })
	id, v, _ := b.identity(t, 20*time.Second)
	victim := filepath.Join(c.root, "node-"+itoa(id), "v"+itoa(v))
	if _, err := os.Stat(filepath.Join(victim, "data.log")); err != nil {
		t.Fatalf("task B's data directory: %v", err)
	}
	if err := os.Symlink(filepath.Join("node-"+itoa(id), "v"+itoa(v)), filepath.Join(c.root, "conf")); err != nil {
		t.Fatal(err)
	}
	tmpl := filepath.Join(c.dir, "a.tmpl")
	if err := os.WriteFile(tmpl, []byte("node.id={{.NodeID}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := c.start("task-a", []string{"NODEID_LEASE_FILE=" + filepath.Join(c.dir, "a.json"),
		"NODEID_TEMPLATE=" + tmpl + ":" + filepath.Join(c.root, "conf", "meta.properties")},
		"run", "--", "sh", "-c", childScript)
	t.Cleanup(func() { _ = a.cmd.Process.Kill() })
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && a.running() {
		if _, err := os.Stat(a.report); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if body, err := os.ReadFile(filepath.Join(victim, "meta.properties")); err == nil {
		t.Errorf("task A (another node) wrote %s into node %d's live data directory %s through the planted %s: %q",
			"meta.properties", id, victim, filepath.Join(c.root, "conf"), body)
	}
	t.Logf("task-a running=%v exit=%d", a.running(), a.code)
}
