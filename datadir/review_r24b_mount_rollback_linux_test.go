package datadir

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeid/nodeid/nodeid"
)

// Review r24b, invariant 3 (never built from an incomplete version; the
// last complete copy is never collected). removeMoved renames a directory
// out of the versions, empties it, and, when it meets a mount point while
// emptying, renames what is left back to its version's name. A stale
// preparer still holding the directory open can link its marker into the
// garbage directory after the removal removed the name aside and listed:
// harmless while it is garbage, but the rename back puts that marker,
// over a half-emptied directory, into the versions.
//
// Schedule (A holds v2, B v3, C v4, one node):
//  1. A copied v1 into v2, validated and flushed it; its lease is lost
//     (paused) before writeMarkerAside.
//  2. B acquires v3; removeLeftoversBelow judges v2 A's leftover, claims
//     it, renames it to its garbage name, removes the name aside (none),
//     and lists it.
//  3. A resumes: writeMarkerAside, its recheck, publishMarker (linkat
//     into the garbage directory it holds open); then it is SIGKILLed
//     before its unlink of the in-progress file could fail and unmark.
//     Meanwhile a file system is mounted on v2/z (a mount arriving
//     mid-walk). Reachability: this tree's own recheck refuses here (the
//     claim file is an entry it did not make), so A is a preparer of the
//     released 0.1.0 (ec9b1e1: its recheck ignores entries it did not
//     make, and nothing was removed yet) during a rolling upgrade, or any
//     writer of the marker that skips that recheck. The test performs A's
//     writeMarkerAside and publishMarker itself.
//  4. B removes d0..d3, meets the mount at z (errMountPoint) and renames
//     the garbage directory back to v2: A's marker is now a valid marker
//     of v2, over nothing but z. B's lease is lost mid-copy (cancelled).
//  5. The mount goes; C acquires v4: the newest valid version below it is
//     v2; v4 is built from it, empty, and C's GC (keep 2: v4, v2) deletes
//     v1, the last complete copy.
func TestReviewR24bMountRollbackPutsStaleMarkerBackIntoVersions(t *testing.T) {
	_, root := bigTmpfsRoot(t)
	c := Cluster{Bucket: "b", Prefix: "p/"}
	files := map[string]string{}
	for d := range 4 {
		for f := range 20 {
			files[fmt.Sprintf("d%d/f%03d", d, f)] = "data"
		}
	}
	makeVersion(t, root, 0, 1, files, 1)
	writeFiles(t, root, map[string]string{OwnerName: `{"bucket":"b","prefix":"p/"}`})

	// A's v2 as step 1 leaves it. z is made first: tmpfs lists newest
	// first, so the removal reaches it after the data.
	v2 := Dir(root, inst(0, 2))
	if err := os.MkdirAll(filepath.Join(v2, "z"), 0o750); err != nil {
		t.Fatal(err)
	}
	d2, err := os.Open(v2)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	writeFiles(t, v2, files)
	if err := writeInProgress(d2, 2, c, "task-A", false); err != nil {
		t.Fatal(err)
	}

	nodePath := filepath.Dir(v2)
	var once sync.Once
	var aErr error
	var mnt string
	setHook(t, &testHookGarbageListed, func(name string) {
		once.Do(func() {
			one := nodeid.Version(1)
			// A, step 3 (its recheck would pass: nothing is removed yet).
			if aErr = writeMarkerAside(d2, Marker{InitializedAt: time.Now(), Version: 2, InitializedFrom: &one}); aErr != nil {
				return
			}
			if aErr = publishMarker(d2); aErr != nil {
				return
			}
			// A is killed here. A mount arrives on z.
			mnt = filepath.Join(nodePath, name, "z")
			if aErr = unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); aErr != nil {
				mnt = ""
			}
		})
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	setHook(t, &testHookFile, func(string) { cancel() }) // B's lease lost mid-copy
	_, _, errB := Prepare(ctx, root, inst(0, 3), Options{Cluster: c, Tenure: "task-B", Logger: quiet, Workers: 1})
	testHookFile, testHookGarbageListed = nil, nil
	if aErr != nil {
		t.Fatalf("schedule not reached: %v", aErr)
	}
	t.Logf("B: %v", errB)
	// The mount goes (it was the transient one).
	if mnt != "" {
		// Where it is: under the garbage name, or v2's if renamed back.
		if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
			if err := unix.Unmount(filepath.Join(v2, "z"), unix.MNT_DETACH); err != nil {
				t.Logf("unmount: %v", err)
			}
		}
	}
	if d, err := os.Open(v2); err == nil {
		if _, merr := readMarker(d, 2); merr == nil {
			names, _ := d.Readdirnames(-1)
			t.Errorf("v2 is back in the versions with a valid marker over %v", names)
		}
		d.Close()
	}

	dir, res, err := Prepare(context.Background(), root, inst(0, 4), Options{Cluster: c, Tenure: "task-C", Logger: quiet})
	if err != nil {
		t.Fatalf("C: %v", err)
	}
	_, statErr := os.Stat(filepath.Join(dir, "d0/f000"))
	_, v1Err := os.Stat(Dir(root, inst(0, 1)))
	if res.Source != 1 || statErr != nil || v1Err != nil {
		t.Errorf("v4 built from v%d (d0/f000: %v); v1: %v; want v4 from v1 and v1 kept", res.Source, statErr, v1Err)
	}
}
