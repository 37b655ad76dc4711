package datadir

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeid/nodeid/nodeid"
)

// Review r24, invariant 3 (never built from an incomplete version; nothing
// deleted that is not our garbage). removeLeftover (Prepare's removal of
// our leftovers below its version, and GC's) unlinks the in-progress file,
// then the marker, lists the directory and removes what it listed. Its
// preparer may still be at work: it wins nothing then, but its
// publishMarker (linkat of the marker written aside) can still land after
// the listing; the preparer only notices when its unlink of the
// in-progress file fails, and then unmarks. Killed (or paused) between the
// two, it leaves a valid marker over a directory the removal emptied:
// rmdir fails on the marker, and the empty directory is a valid version.
//
// Schedule (A holds v2, B v3, C v4, one node):
//  1. A has copied v1 into v2, validated, flushed, written the marker aside
//     and passed its recheck. A's lease is lost (paused).
//  2. B acquires v3. Its plan: v2 is our leftover, source v1. Its
//     removeLeftoversBelow unlinks v2's in-progress file and lists v2.
//  3. A resumes for two system calls: publishMarker links the marker in
//     place; then A is SIGKILLed (its task is stopped), before its unlink
//     of the in-progress file could fail and unmark.
//  4. B removes what it listed (all data, the name aside); rmdir fails on
//     the marker ("removing a leftover", a warning). B copies v1; its
//     lease is lost mid-copy (context cancelled), its target removed.
//  5. C acquires v4: the newest valid version below it is v2, which holds
//     nothing but a marker. v4 is built from it, empty, and C's GC
//     (keep 2: v4, v2) deletes v1, the last complete copy of node 0's data.
//
// Want: v4 built from v1 (or refused), v1 kept. Got: see the failure.
//
// Fixed: the removal claims the leftover (renames its in-progress file),
// renames the directory out of the versions, and removes the name aside
// before it lists anything. So A's link lands in the whole v2 (published
// right after B's claim, before B's rename: "after the claim"), in the
// garbage directory, or fails (the name aside is gone: "once the removal is
// under way", the original schedule); never in a version being emptied.
func TestRev24PreparerKilledAfterPublishLeavesAMarkerOverARemovedLeftover(t *testing.T) {
	for _, when := range []string{"after the claim", "once the removal is under way"} {
		t.Run(when, func(t *testing.T) { testPublishDuringRemoval(t, when == "after the claim") })
	}
}

func testPublishDuringRemoval(t *testing.T, afterClaim bool) {
	_, root := bigTmpfsRoot(t)
	c := Cluster{Bucket: "b", Prefix: "p/"}
	files := map[string]string{}
	for d := range 4 {
		for f := range 400 {
			files[fmt.Sprintf("d%d/f%03d", d, f)] = "data"
		}
	}
	makeVersion(t, root, 0, 1, files, 1)
	// The root is this cluster's (claimed by an earlier preparation).
	writeFiles(t, root, map[string]string{OwnerName: `{"bucket":"b","prefix":"p/"}`})
	// A's v2 as step 1 leaves it: the marker aside is written after the
	// data, so it is listed first on tmpfs (newest first). The layout
	// below only puts the data first in the listing, as ext4's hash order
	// does for some names: A's link must come before B removes the name
	// aside, after it listed.
	v2 := Dir(root, inst(0, 2))
	if err := os.MkdirAll(v2, 0o750); err != nil {
		t.Fatal(err)
	}
	d2, err := os.Open(v2)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	one := nodeid.Version(1)
	if err := writeMarkerAside(d2, Marker{InitializedAt: time.Now(), Version: 2, InitializedFrom: &one}); err != nil {
		t.Fatal(err)
	}
	if err := writeInProgress(d2, 2, c, "task-A", false); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, v2, files)
	names, err := d2.Readdirnames(-1)
	if err != nil || names[len(names)-1] != markerAsideName {
		t.Fatalf("listing of v2 = %v (%v); the schedule needs the name aside listed last", names, err)
	}

	// B prepares v3; A publishes its marker once B claimed v2 (or once B
	// started removing it: step 3), and is killed.
	var prog atomic.Int64
	published := make(chan error, 1)
	var once sync.Once
	publish := func() {
		once.Do(func() { published <- unix.Linkat(int(d2.Fd()), markerAsideName, int(d2.Fd()), MarkerName, 0) })
	}
	if afterClaim {
		setHook(t, &testHookAfterClaim, func(string) { publish() })
	} else {
		// Once B's removal listed v2 (renamed out of the versions, its
		// name aside removed). Progress is no signal for it: judging
		// the versions counts too (r24g).
		setHook(t, &testHookGarbageListed, func(string) { publish() })
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	setHook(t, &testHookFile, func(string) { cancel() }) // B's lease lost mid-copy
	_, _, errB := Prepare(ctx, root, inst(0, 3), Options{Cluster: c, Tenure: "task-B", Progress: &prog, Logger: quiet, Workers: 1})
	switch err := <-published; {
	case err == nil:
		t.Logf("A's publishMarker linked its marker")
	case afterClaim:
		t.Fatalf("A's publishMarker: %v (schedule not reached)", err)
	case errors.Is(err, unix.ENOENT):
		// The name aside was removed before anything was listed: no link
		// can land once the removal is under way.
		t.Logf("A's publishMarker: %v: the name aside was gone", err)
	default:
		t.Fatalf("A's publishMarker: %v", err)
	}
	testHookFile, testHookAfterClaim, testHookGarbageListed = nil, nil, nil
	t.Logf("B: %v", errB)
	if _, err := os.Lstat(v2); !errors.Is(err, fs.ErrNotExist) {
		left, _ := os.ReadDir(v2)
		var leftNames []string
		for _, e := range left {
			leftNames = append(leftNames, e.Name())
		}
		t.Errorf("v2 after B: %v (%v); want it out of the versions", leftNames, err)
	}

	dir, res, err := Prepare(context.Background(), root, inst(0, 4), Options{Cluster: c, Tenure: "task-C", Logger: quiet})
	if err != nil {
		t.Fatalf("C: %v", err)
	}
	_, statErr := os.Stat(filepath.Join(dir, "d0/f000"))
	_, v1Err := os.Stat(Dir(root, inst(0, 1)))
	if res.Source != 1 || statErr != nil || v1Err != nil {
		t.Errorf("v4 built from v%d (d0/f000: %v); v1: %v: node 0 started from a version that holds only a marker, and its last complete copy was collected; want v4 from v1 and v1 kept",
			res.Source, statErr, v1Err)
	}
	// Nothing of v2 is left behind: not in the versions, not as garbage.
	entries, err := os.ReadDir(filepath.Dir(v2))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := parseGarbageName(e.Name()); ok {
			t.Errorf("%s left in the node directory after C's garbage collection", e.Name())
		}
	}
}

// bigTmpfsRoot is smallTmpfsRoot with room for a few thousand files.
func bigTmpfsRoot(t *testing.T) (mnt, root string) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	mnt = t.TempDir()
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=256m"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	root = filepath.Join(mnt, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	return mnt, root
}
