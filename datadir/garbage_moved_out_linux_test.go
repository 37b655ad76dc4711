package datadir

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// Review r24e: a garbage directory renamed out of the data root by a tenant
// between the keepers' unlink and the rmdir: rmdirAt says "replaced", and
// removeGarbage now writes its keeper back through its descriptor, that is
// into the directory at its new place, outside the data root.
func TestKeeperIsNotWrittenOutsideTheDataRoot(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	outside := filepath.Join(dir, "outside")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	makeVersion(t, root, 0, 1, map[string]string{"a/f": "1"}, 1)
	makeVersion(t, root, 0, 2, map[string]string{"a/f": "2"}, 2)
	nodeDir := filepath.Dir(Dir(root, inst(0, 1)))
	moved := ""
	setHook(t, &testHookKeepersRemoved, func() {
		ents, err := os.ReadDir(nodeDir)
		if err != nil {
			t.Error(err)
			return
		}
		for _, e := range ents {
			if _, ok := parseGarbageName(e.Name()); ok && moved == "" {
				moved = filepath.Join(outside, e.Name())
				if err := os.Rename(filepath.Join(nodeDir, e.Name()), moved); err != nil {
					t.Error(err)
				}
			}
		}
	})
	_, err := Collect(context.Background(), root, inst(0, 2), Options{Keep: 1, Logger: quiet})
	testHookKeepersRemoved = nil
	t.Logf("Collect: %v", err)
	if moved == "" {
		t.Fatal("the hook found no garbage directory to move")
	}
	ents, err := os.ReadDir(moved)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("%s written outside the data root (in %s)", e.Name(), moved)
	}
}
