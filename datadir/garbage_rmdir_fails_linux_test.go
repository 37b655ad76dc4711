package datadir

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// Regression (review): removeGarbage wrote its keeper (the claim, or the
// marker renamed to removingName) back only when its
// rmdir failed with ENOTEMPTY or EEXIST. Any other failure (EACCES: node-N
// made read-only by a tenant between the keepers' unlink and the rmdir)
// left the emptied directory with nothing of ours in it, judged not ours
// by every later garbage collection, for good.
func TestKeeperIsWrittenBackWhateverStopsTheRmdir(t *testing.T) {
	dir, ok := nobodyDir(t)
	if !ok {
		asNobody(t, "TestKeeperIsWrittenBackWhateverStopsTheRmdir")
		return
	}
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	makeVersion(t, root, 0, 1, map[string]string{"a/f": "1"}, 1)
	makeVersion(t, root, 0, 2, map[string]string{"a/f": "2"}, 2)
	nodeDir := filepath.Dir(Dir(root, inst(0, 1)))
	t.Cleanup(func() { os.Chmod(nodeDir, 0o755) })
	locked := 0
	setHook(t, &testHookKeepersRemoved, func() {
		if err := os.Chmod(nodeDir, 0o555); err != nil {
			t.Error(err)
		}
		locked++
	})
	_, err := Collect(context.Background(), root, inst(0, 2), Options{Keep: 1, Logger: quiet})
	testHookKeepersRemoved = nil
	if locked == 0 {
		t.Fatal("removeGarbage did not reach its rmdir")
	}
	t.Logf("Collect with node-0 read-only at the rmdir: %v", err)
	if err := os.Chmod(nodeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	garbage := func() []string {
		ents, err := os.ReadDir(nodeDir)
		if err != nil {
			t.Fatal(err)
		}
		var g []string
		for _, e := range ents {
			if _, ok := parseGarbageName(e.Name()); ok {
				g = append(g, e.Name())
			}
		}
		return g
	}
	left := garbage()
	if len(left) == 0 {
		t.Fatal("no garbage left by the failed rmdir: the test did not make it fail")
	}
	for _, g := range left {
		d, err := os.Open(filepath.Join(nodeDir, g))
		if err != nil {
			t.Fatal(err)
		}
		kept := false
		for _, n := range keeperNames {
			kept = kept || fileExists(d, n)
		}
		if !kept {
			t.Errorf("%s: none of %v after the failed rmdir; want the first written back", g, keeperNames)
		}
		d.Close()
	}
	if _, err := Collect(context.Background(), root, inst(0, 2), Options{Keep: 1, Logger: quiet}); err != nil {
		t.Fatalf("the next Collect: %v", err)
	}
	if g := garbage(); len(g) != 0 {
		t.Errorf("after the next Collect, %v is still there; want it removed (it was ours)", g)
	}
}
