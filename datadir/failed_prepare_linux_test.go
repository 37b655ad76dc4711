package datadir

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/nodeid/nodeid/nodeid"
)

// After ENOSPC in the middle of a copy, the partial copy is removed, and
// once space is freed the next version is prepared (issue 19, item 2). On
// a 4 MiB tmpfs: v1 holds 1.8 MB, a filler outside the node 1.2 MB, so v2's
// copy runs out of space; with v2's partial copy left in place, v3 would
// run out too after the filler is removed.
func TestENOSPCLeavesNoPartialCopy(t *testing.T) {
	mnt, root := smallTmpfsRoot(t)
	big := string(bytes.Repeat([]byte("x"), 900<<10))
	makeVersion(t, root, 0, 1, map[string]string{"a": big, "b": big}, 1)
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, bytes.Repeat([]byte("f"), 1200<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := Options{Logger: quiet, Tenure: "task-2"}
	_, _, err := Prepare(context.Background(), root, inst(0, 2), opts)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Prepare v2: err = %v, want ENOSPC", err)
	}
	if got := versionsOf(t, root, 0); !slices.Equal(got, []string{"v1"}) {
		t.Errorf("after ENOSPC: %v, want [v1] (the partial v2 removed)", got)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	opts.Tenure = "task-3"
	dir, _ := mustPrepare(t, root, inst(0, 3), opts)
	equalMaps(t, contents(t, dir), map[string]string{"a": big, "b": big})
	if got := versionsOf(t, root, 0); !slices.Equal(got, []string{"v1", "v3"}) {
		t.Errorf("after v3: %v, want [v1 v3]", got)
	}
}

// A leftover of our cluster below the target that a failed attempt could
// not remove (a crash mid-copy) is removed before the copy, not only by GC
// after it: on a full disk the copy would otherwise fail for ever.
func TestLeftoverBelowIsRemovedBeforeTheCopy(t *testing.T) {
	_, root := smallTmpfsRoot(t)
	big := string(bytes.Repeat([]byte("x"), 900<<10))
	makeVersion(t, root, 0, 1, map[string]string{"a": big, "b": big}, 1)
	// A crashed v2: 1.2 MB copied, its in-progress file, no marker.
	v2 := makeVersion(t, root, 0, 2, map[string]string{"a": big, "b": big[:300<<10]}, -1)
	writePreparing(t, v2, 2, Cluster{})
	_, res := mustPrepare(t, root, inst(0, 3), Options{Logger: quiet, Tenure: "task-3"})
	if got := versionsOf(t, root, 0); !slices.Equal(got, []string{"v1", "v3"}) {
		t.Errorf("after v3: %v, want [v1 v3]", got)
	}
	if !slices.Contains(res.Removed, v2) {
		t.Errorf("Removed = %v, want it to list %s", res.Removed, v2)
	}
}

// An unreadable source file fails every preparation; each leaves nothing
// behind, so restarts do not pile up partial copies (issue 19, item 2).
// As uid 65534: root reads any file.
func TestUnreadableSourceLeavesNoPileOfCopies(t *testing.T) {
	dir, ok := nobodyDir(t)
	if !ok {
		asNobody(t, "TestUnreadableSourceLeavesNoPileOfCopies")
		return
	}
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	v1 := makeVersion(t, root, 0, 1, map[string]string{"a": "1", "b": "2", "sub/c": "3", "z": "4"}, 1)
	if err := os.Chmod(filepath.Join(v1, "sub", "c"), 0); err != nil {
		t.Fatal(err)
	}
	for v := range 3 {
		ver := inst(0, 2+nodeid.Version(v))
		_, _, err := Prepare(context.Background(), root, ver, Options{Logger: quiet, Tenure: "task"})
		if !errors.Is(err, os.ErrPermission) {
			t.Fatalf("Prepare %v: err = %v, want permission denied", ver, err)
		}
		if got := versionsOf(t, root, 0); !slices.Equal(got, []string{"v1"}) {
			t.Fatalf("after attempt %d: %v, want [v1]", v+1, got)
		}
	}
}

// smallTmpfsRoot mounts a 4 MiB tmpfs (unmounted at cleanup) and returns
// it and a data root in it: a disk that fills up. It needs root; under
// CI=true a refused mount fails the test instead of skipping it.
func smallTmpfsRoot(t *testing.T) (mnt, root string) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	mnt = t.TempDir()
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=4m"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mount tmpfs: %v", err)
		}
		t.Skipf("mounting a tmpfs is not permitted here (%v): the ENOSPC schedule is not tested", err)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	root = filepath.Join(mnt, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	return mnt, root
}

// Review rev18, checked and sound: a preparation cancelled (or failing) in
// the middle of a parallel copy leaves no goroutine behind, writes nothing
// after it returned, leaves no marker and removes its partial target.
func TestRev18CancelledParallelCopyLeavesNothingRunning(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(map[bool]string{false: "cancelled", true: "failing file"}[fail], func(t *testing.T) {
			root := t.TempDir()
			files := map[string]string{}
			for d := range 8 {
				for f := range 40 {
					files[filepath.Join(string(rune('a'+d)), "sub", string(rune('a'+f%26))+string(rune('a'+f/26)))] = "data"
				}
			}
			src := makeVersion(t, root, 0, 1, files, 1)
			if fail {
				// One directory fails mid-walk: ErrUnsafeSymlink.
				if err := os.Symlink("/etc", filepath.Join(src, "c/sub/zz")); err != nil {
					t.Fatal(err)
				}
			}
			before := runtime.NumGoroutine()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			n := 0
			setHook(t, &testHookFile, func(rel string) {
				if n++; n == 100 && !fail {
					cancel()
				}
			})
			opts := Options{Logger: quiet, Workers: 32}
			_, _, err := Prepare(ctx, root, inst(0, 2), opts)
			if err == nil {
				t.Fatal("Prepare succeeded")
			}
			time.Sleep(100 * time.Millisecond)
			if g := runtime.NumGoroutine(); g > before {
				t.Errorf("%d goroutines after Prepare returned, %d before (%v)", g, before, err)
			}
			if exists(t, Dir(root, inst(0, 2))) {
				t.Errorf("the failed target stayed (%v)", err)
			}
		})
	}
}
