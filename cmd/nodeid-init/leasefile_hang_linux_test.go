package main_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/efsfs"
	"github.com/nodeid/nodeid/internal/s3test"
)

// Found by a review: the lease file is written synchronously from the
// provider's OnEvent, i.e. on the renew loop's goroutine and on the loss
// path. A lease file on a file system that stops answering (not the data
// root, so --fs-timeout does not watch it) blocks the renew loop at its
// next event; the watchdog then fences at the deadline, but the EventLost
// write waits on fileMu behind the hung write, OnLost never runs, and
// nodeid-init never exited. Now the tree is killed and it exits 3.
func TestHungLeaseFileStillEndsTheTask(t *testing.T) {
	f := efsfs.MountT(t, efsfs.Profile{})
	c := newCluster(t, s3test.StartVersity(t), 1)
	tk := c.start("holder", []string{"NODEID_LEASE_FILE=" + filepath.Join(f.Dir, "lease.json"), "NODEID_FS_TIMEOUT=2s"},
		"run", "--", "sh", "-c", childScript)
	tk.identity(t, 20*time.Second)
	f.HangAll()
	t.Cleanup(f.Release)
	// Lease 2 s: the deadline passes within 2 s, fs-timeout is 2 s.
	select {
	case <-tk.done:
		if tk.code != 3 {
			t.Fatalf("exit %d, want 3 (lease lost):\n%s", tk.code, tk.out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("nodeid-init still running 20s after the lease file's file system hung (lease 2s, fs-timeout 2s):\n%s", tk.out.String())
	}
}
