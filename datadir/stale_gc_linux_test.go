package datadir

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeid/nodeid/nodeid"
)

// A stale holder's garbage collection may remove the source that the
// current holder's Prepare is copying from. Validation only checks that what
// the source holds *now* is in the target, so a GC that stops half-way
// (SIGKILL, a pause, an I/O error on EFS) used to leave a torn copy with a
// valid marker (review 2). Prepare now re-reads the source's marker after
// validation (GC removes it first) and fails with ErrValidation instead.
//
// Schedule (Keep 1; two stale holders suffice with the default Keep 2, see
// the second test):
//
//	v1 valid (the node's data).
//	A acquires v2 and is paused before its marker; its lease expires.
//	B takes over v3: planPrepare sees v2 as our leftover, so its source is
//	v1; B starts copying v1 and is descheduled just before the file "k".
//	A resumes before its context is cancelled (the cancel is asynchronous;
//	neither the marker nor GC re-checks the lease): marker on v2, then GC
//	with current v2 and Keep 1 counts v2, v1 and removes v1: the
//	in-progress file, the marker, then the files of z/ ... and stops
//	(SIGKILL / pause / EIO; here an immutable file stands for that line).
//	B resumes: copies k, lists z/ (now missing the files A removed), copies
//	what is left, validates against the shrunken v1 -> passes; B must then
//	see that v1 lost its marker and write none.
//
// The immutable flag (root only) on k and z/stop only decides where A's GC
// stops; every step runs through the real Prepare.

func setImmutable(t *testing.T, path string) {
	t.Helper()
	flags, err := inodeFlags(path)
	var openErr *fs.PathError // from the open; the ioctl's is a bare errno
	if errors.As(err, &openErr) {
		t.Fatal(err)
	}
	if err != nil {
		t.Skipf("inode flags unsupported on %s: %v", path, err)
	}
	if err := setInodeFlags(path, flags|fsImmutableFL); err != nil {
		t.Skipf("cannot set the immutable flag (needs root): %v", err)
	}
	t.Cleanup(func() { _ = setInodeFlags(path, flags) })
}

func staleGCTearsSuccessor(t *testing.T, stale []int64, successor int64, keep int) {
	refused := 0
	for attempt := 0; attempt < 40; attempt++ {
		root := t.TempDir()
		hooked := fmt.Sprintf("k%02d", attempt) // sorts after the marker, before z
		files := map[string]string{hooked: "k data", "z/stop": "stop"}
		for i := 0; i < 20; i++ {
			files[fmt.Sprintf("z/x%02d", i)] = fmt.Sprintf("segment %d", i)
		}
		v1 := makeVersion(t, root, 0, 1, files, 1)
		setImmutable(t, filepath.Join(v1, hooked))
		setImmutable(t, filepath.Join(v1, "z", "stop"))
		// A's GC renamed v1 out of the versions before it stopped: clear
		// the flags where the files are now (runs before setImmutable's).
		t.Cleanup(func() { clearImmutableBelow(root) })

		ran := false
		var staleErrs []error
		setHook(t, &testHookFile, func(rel string) {
			if rel != hooked || ran {
				return
			}
			ran = true
			for _, v := range stale {
				_, _, err := Prepare(context.Background(), root, inst(0, nodeidVersion(v)),
					Options{Keep: keep, Cluster: clusterA, Logger: quiet})
				staleErrs = append(staleErrs, err)
			}
		})
		dir, _, err := Prepare(context.Background(), root, inst(0, nodeidVersion(successor)),
			Options{Keep: keep, Cluster: clusterA, Logger: quiet})
		testHookFile = nil
		if !ran {
			t.Fatal("hook never ran")
		}
		if errors.Is(err, ErrValidation) && strings.Contains(err.Error(), "lost its marker") {
			refused++
			if exists(t, filepath.Join(Dir(root, inst(0, nodeidVersion(successor))), MarkerName)) {
				t.Fatalf("attempt %d: %v, yet the target has a marker", attempt, err)
			}
			continue
		}
		if err != nil {
			continue // A's GC stopped before anything B still needed
		}
		got := contents(t, dir)
		var missing []string
		for name := range files {
			if _, ok := got[name]; !ok {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			t.Fatalf("attempt %d: v%d was prepared from v1 and has a valid marker (%v), but lacks %d of v1's files: %v\n(stale preparations: %v)",
				attempt, successor, readMarkerFile(t, dir), len(missing), keysOf(missing), staleErrs)
		}
	}
	if refused == 0 {
		t.Error("no attempt tore the source: the schedule no longer reaches the check")
	}
}

// clearImmutableBelow clears the immutable flag of every regular file
// below root.
func clearImmutableBelow(root string) {
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if flags, err := inodeFlags(p); err == nil && flags&fsImmutableFL != 0 {
				_ = setInodeFlags(p, flags&^fsImmutableFL)
			}
		}
		return nil
	})
}

func keysOf(s []string) []string {
	m := map[string]string{}
	for _, k := range s {
		m[k] = ""
	}
	return keys(m)
}

func TestStaleGCOfTheSourceFailsThePreparationKeep1(t *testing.T) {
	staleGCTearsSuccessor(t, []int64{2}, 3, 1)
}

// With the default Keep 2 it takes two stale holders: A1 (v2) and A2 (v3)
// both paused before their markers while B (v4) plans from v1; they resume
// in turn, A2 prepares from A1's v2, and A2's GC counts v3, v2, v1.
func TestStaleGCOfTheSourceFailsThePreparationDefaultKeep(t *testing.T) {
	staleGCTearsSuccessor(t, []int64{2, 3}, 4, 0)
}

func nodeidVersion(v int64) nodeid.Version { return nodeid.Version(v) }
