package datadir

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// A stale preparer's late write landing between removeGarbage's unlink of
// the claim (the last file of ours) and its rmdir: the claim is written
// back, so the next garbage collection still judges the directory ours
// and removes it (docs/datadir.md, Garbage collection).
func TestLateWriteAfterTheClaimsUnlinkGetsTheClaimBack(t *testing.T) {
	_, root := bigTmpfsRoot(t)
	c := Cluster{Bucket: "b", Prefix: "p/"}
	files := map[string]string{"d0/f0": "data"}
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
	// Every removal pass of B (its own, and its GC's) meets one late file
	// after its claim went; the claim must be back each time, at the next
	// pass's listing (or after B).
	n, pending := 0, false
	var claimBack []bool
	setHook(t, &testHookKeepersRemoved, func() {
		if err := createFile(d2, fmt.Sprintf("late-%d", n), []byte("data")); err != nil {
			t.Errorf("A's late write %d: %v", n, err)
		}
		n, pending = n+1, true
	})
	setHook(t, &testHookGarbageListed, func(string) {
		if pending {
			claimBack, pending = append(claimBack, fileExists(d2, claimName)), false
		}
	})
	_, _, errB := Prepare(context.Background(), root, inst(0, 3), Options{Cluster: c, Tenure: "task-B", Logger: quiet})
	testHookKeepersRemoved, testHookGarbageListed = nil, nil
	if pending {
		claimBack = append(claimBack, fileExists(d2, claimName))
	}
	t.Logf("B: %v (%d late files)", errB, n)
	if n < 2 {
		t.Fatalf("B's removal reached its rmdir %d times; want at least 2", n)
	}
	t.Logf("claim back after each late write: %v", claimBack)
	for i, ok := range claimBack {
		if !ok {
			t.Errorf("pass %d: the claim was not written back after a late write between its unlink and the rmdir", i+1)
		}
	}
	if _, _, err := Prepare(context.Background(), root, inst(0, 4), Options{Cluster: c, Tenure: "task-C", Logger: quiet}); err != nil {
		t.Fatalf("C: %v", err)
	}
	ents, err := os.ReadDir(filepath.Dir(v2))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if _, ok := parseGarbageName(e.Name()); ok {
			t.Errorf("after C's preparation, %s is still there; want it removed (v2 was ours)", e.Name())
		}
	}
}

func fileExists(d *os.File, name string) bool {
	_, err := readSmallFileAt(d, name)
	return err == nil
}
