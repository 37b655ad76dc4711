package datadir

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Review r24c, availability (and docs/datadir.md, Garbage collection: "A
// stale preparer still writing through its descriptor makes the rmdir
// fail (not empty): it is emptied again ... at most three times, and what
// is left the next GC removes"). removeGarbage removes our own files (the
// claim, the in-progress file, the markers) in its first pass, so what a
// stale preparer still copying writes after that pass is in a garbage
// directory that holds nothing of ours any more: every later GC judges it
// not ours and leaves it, for good.
//
// Schedule (A holds v2, B v3, C v4):
//  1. A is copying v1 into v2 (its lease lost; it goes on through the
//     descriptor it holds).
//  2. B prepares v3: claims v2, renames it to its garbage name, empties it;
//     after each of its three listings A creates one more file (emulated
//     through A's descriptor, as its copy does: openat O_CREAT|O_EXCL).
//  3. B gives up ("not removed yet"); A stops (killed).
//  4. C prepares v4, B's garbage directory is below it: want it removed.
func TestReviewR24cLateWritesOfAStalePreparerLeaveGarbageForGood(t *testing.T) {
	_, root := bigTmpfsRoot(t)
	c := Cluster{Bucket: "b", Prefix: "p/"}
	files := map[string]string{"d0/f0": "data", "d0/f1": "data"}
	makeVersion(t, root, 0, 1, files, 1)
	writeFiles(t, root, map[string]string{OwnerName: `{"bucket":"b","prefix":"p/"}`})
	v2 := Dir(root, inst(0, 2))
	if err := os.MkdirAll(v2, 0o750); err != nil {
		t.Fatal(err)
	}
	d2, err := os.Open(v2)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if err := writeInProgress(d2, 2, c, "task-A", false); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, v2, files)
	n := 0
	setHook(t, &testHookGarbageListed, func(string) {
		if n < 3 {
			if err := createFile(d2, fmt.Sprintf("late-%d", n), []byte("data")); err != nil {
				t.Errorf("A's late write %d: %v", n, err)
			}
			n++
		}
	})
	_, _, errB := Prepare(context.Background(), root, inst(0, 3), Options{Cluster: c, Tenure: "task-B", Logger: quiet})
	testHookGarbageListed = nil
	t.Logf("B: %v (A wrote %d files during its removal)", errB, n)
	node := filepath.Dir(v2)
	garbage := func() []string {
		var g []string
		ents, _ := os.ReadDir(node)
		for _, e := range ents {
			if _, ok := parseGarbageName(e.Name()); ok {
				left, _ := os.ReadDir(filepath.Join(node, e.Name()))
				var names []string
				for _, l := range left {
					names = append(names, l.Name())
				}
				g = append(g, e.Name()+" ["+strings.Join(names, " ")+"]")
			}
		}
		return g
	}
	t.Logf("after B: %v", garbage())
	if _, _, err := Prepare(context.Background(), root, inst(0, 4), Options{Cluster: c, Tenure: "task-C", Logger: quiet}); err != nil {
		t.Fatalf("C: %v", err)
	}
	if _, err := Collect(context.Background(), root, inst(0, 4), Options{Cluster: c, Logger: quiet}); err != nil {
		t.Logf("Collect: %v", err)
	}
	if g := garbage(); len(g) > 0 {
		t.Errorf("after C's preparation and a Collect, B's garbage is still there: %v; want it removed (v2 was ours)", g)
	}
}
