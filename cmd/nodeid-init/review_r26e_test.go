package main_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
)

// Review r26e (invariant 5): underDataRoot opens each prefix of the
// output's directory from / following every symlink, the tenant's too,
// and only then walks up with `..`. When the operator's symlink points at
// a directory inside the data root (/alias -> R/conf) and another tenant
// replaces that directory by a symlink out of the data root
// (R/conf -> OUTSIDE), opening /alias lands in OUTSIDE, whose `..` walk
// never meets R: the output is taken for an operator's path and written
// there, outside the data root.
//
// Schedule: data root R; the operator's /alias -> R/conf (R/conf a real
// directory when configured); another tenant does rm -r R/conf;
// ln -s OUTSIDE R/conf; run starts with --template src:/alias/broker.properties
// and --peers-file /alias/peers.json. Wanted: exit 2 or nothing written
// outside R; got: OUTSIDE written.
func TestReviewR26eOutputThroughTheOperatorsSymlinkWhoseTargetInsideTheDataRootIsSwappedForASymlinkOutIsWrittenOutside(t *testing.T) {
	c := newCluster(t, s3test.NewFake(t), 1)
	outside := t.TempDir()
	conf := filepath.Join(c.root, "conf")
	// The tenant's swap: R/conf, the operator's target, is now a symlink out.
	if err := os.Symlink(outside, conf); err != nil {
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
	tk := c.start("node-0", []string{"NODEID_TEMPLATE=" + tmpl + ":" + filepath.Join(alias, "broker.properties"),
		"NODEID_PEERS_FILE=" + filepath.Join(alias, "peers.json")},
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
		t.Errorf("wrote %s, outside the data root %s, through %s (the operator's symlink to %s inside the data root, which the tenant replaced by a symlink out of it)",
			filepath.Join(outside, e.Name()), c.root, alias, conf)
	}
	t.Logf("node-0 running=%v exit=%d; output:\n%s", tk.running(), tk.code, tk.out.String())
}

// Review r26e (invariant 5), the same gap for $TMPDIR (checkTempDirPlacement
// and tempRoot use underDataRoot): TMPDIR=/alias with the operator's
// /alias -> R/tmp and the tenant's R/tmp replaced by a symlink to OUTSIDE.
// The default lease file's directory, lock, lease and peers files are
// created in OUTSIDE.
func TestReviewR26eTempDirThroughTheOperatorsSymlinkWhoseTargetInsideTheDataRootIsSwappedForASymlinkOutIsWrittenOutside(t *testing.T) {
	c := newCluster(t, s3test.NewFake(t), 1)
	outside := t.TempDir()
	tmp := filepath.Join(c.root, "tmp")
	if err := os.Symlink(outside, tmp); err != nil {
		t.Fatal(err)
	}
	alias := filepath.Join(c.dir, "alias")
	if err := os.Symlink(tmp, alias); err != nil {
		t.Fatal(err)
	}
	tk := c.start("node-0", []string{"TMPDIR=" + alias}, "run", "--", "sh", "-c", childScript)
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
		t.Errorf("created %v, outside the data root %s, through $TMPDIR %s (the operator's symlink to %s inside the data root, which the tenant replaced by a symlink out of it)",
			written, c.root, alias, tmp)
	}
	t.Logf("node-0 running=%v exit=%d", tk.running(), tk.code)
}
