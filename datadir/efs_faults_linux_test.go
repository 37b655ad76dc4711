package datadir

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/efsfs"
)

// TestFaultsMidPrepareOnEFS injects a fault into the EFS-like FUSE mount
// while Prepare is copying or linking: ENOSPC, EIO, a failing link, a
// hanging fsync. Prepare fails within a bounded time with an error that
// says what happened and is not a refusal (nodeid-init exits 1, not 6),
// writes no marker, leaves the earlier version as it was, and the next
// attempt, by the same task or by another one at the next version,
// succeeds.
func TestFaultsMidPrepareOnEFS(t *testing.T) {
	files := map[string]string{}
	for i := range 200 {
		files[fmt.Sprintf("d%d/f%03d", i%5, i)] = strings.Repeat(string(rune('a'+i%26)), 1024)
	}
	for _, tc := range []struct {
		name     string
		graceful bool
		inject   func(*efsfs.FS)
		want     string // in the error
	}{
		{"ENOSPC", false, func(f *efsfs.FS) { f.Inject(efsfs.Fault{Errno: syscall.ENOSPC, AfterBytes: 20 << 10}) }, "no space left on device"},
		{"EIO", false, func(f *efsfs.FS) { f.Inject(efsfs.Fault{Errno: syscall.EIO, AfterOps: 30}) }, "input/output error"},
		{"failing link", true, func(f *efsfs.FS) { f.Inject(efsfs.Fault{Errno: syscall.EIO, Ops: []efsfs.Op{efsfs.OpLink}}) }, "linkat"},
		// The tree's flush passes, the marker's fsync fails: the marker
		// (written whole) must go, or it would vouch for v2.
		{"EIO on the marker's fsync", true, func(f *efsfs.FS) {
			f.Inject(efsfs.Fault{Errno: syscall.EIO, Ops: []efsfs.Op{efsfs.OpFsync}, AfterOps: 1})
		}, "writing marker"},
		{"hanging fsync", true, func(f *efsfs.FS) { f.HangFsync() }, "did not return within"},
	} {
		for _, next := range []string{"same task", "another task"} {
			t.Run(tc.name+", then "+next, func(t *testing.T) {
				efs := efsfs.MountT(t, efsfs.Profile{})
				root := efs.Dir
				claimRoot(t, root, clusterA)
				v1 := makeVersion(t, root, 0, 1, files, 1)
				marker1, err := os.ReadFile(filepath.Join(v1, MarkerName))
				if err != nil {
					t.Fatal(err)
				}
				old := SyncTimeout
				SyncTimeout = time.Second
				t.Cleanup(func() { SyncTimeout = old })
				var n atomic.Int64
				setHook(t, &testHookFile, func(string) {
					if n.Add(1) == 40 {
						tc.inject(efs)
					}
				})
				opts := Options{Cluster: clusterA, Tenure: "task-a", PreviousGraceful: tc.graceful, Workers: 4, Logger: quiet}
				start := time.Now()
				_, _, err = Prepare(context.Background(), root, inst(0, 2), opts)
				elapsed := time.Since(start)
				// The fault ends: the kernel holds v2's lock during a
				// hanging fsync of it, so even looking into v2 waits
				// until then (as on a hung NFS server).
				efs.Clear()
				efs.Release()
				testHookFile = nil
				switch {
				case err == nil:
					t.Fatal("Prepare succeeded with a fault injected")
				case !strings.Contains(err.Error(), tc.want):
					t.Errorf("err = %v, want it to say %q", err, tc.want)
				case isRefusal(err):
					t.Errorf("err = %v is a refusal (nodeid-init would exit 6 and not retry)", err)
				}
				if elapsed > 30*time.Second {
					t.Errorf("Prepare took %v to fail", elapsed)
				}
				t.Logf("failed after %v: %v", elapsed, err)
				v2 := Dir(root, inst(0, 2))
				if _, err := os.Stat(filepath.Join(v2, MarkerName)); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("marker of the failed v2: %v, want none", err)
				}
				equalMaps(t, contents(t, v1), files)
				if b, err := os.ReadFile(filepath.Join(v1, MarkerName)); err != nil || string(b) != string(marker1) {
					t.Errorf("v1's marker changed: %q, %v", b, err)
				}

				if next == "same task" {
					dir, _ := mustPrepare(t, root, inst(0, 2), opts)
					equalMaps(t, contents(t, dir), files)
					return
				}
				opts.Tenure = "task-b"
				dir, _ := mustPrepare(t, root, inst(0, 3), opts)
				equalMaps(t, contents(t, dir), files)
				if exists(t, v2) {
					t.Errorf("the failed v2 is still there below v3")
				}
				equalMaps(t, contents(t, v1), files)
			})
		}
	}
}

func isRefusal(err error) bool {
	for _, r := range []error{ErrNewerVersion, ErrVersionUsed, ErrUnrecognized, ErrForeignCluster} {
		if errors.Is(err, r) {
			return true
		}
	}
	return false
}
