package main_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/efsfs"
	"github.com/nodeid/nodeid/internal/s3test"
)

// Issue 24.1: `release --force --data-root` scans the data root for the
// newest version (datadir.Newest) within the default file-system bound
// (release has no --fs-timeout: 4L, at least 30 s): a hung data root
// exits 7 with one line naming the scan, and releases nothing.
func TestReleaseWithAHungDataRootExits7(t *testing.T) {
	f := efsfs.MountT(t, efsfs.Profile{})
	c := newCluster(t, s3test.NewFake(t), 1)
	hung := f.HangAll()
	tk := c.start("operator", nil, "release", "--node", "0", "--force", "--version", "1", "--data-root", f.Dir)
	t.Cleanup(f.Release) // runs first: lets the blocked call return, then the process is killed
	select {
	case <-hung:
	case <-time.After(20 * time.Second):
		t.Fatalf("release never reached the data root:\n%s", tk.out.String())
	}
	code := tk.wait(t, 50*time.Second)
	if code != exitFSHung {
		t.Errorf("exit code %d, want %d (a hung data root):\n%s", code, exitFSHung, tk.out.String())
	}
	if out := tk.out.String(); !strings.Contains(out, "hung") || !strings.Contains(out, "scan of node-0") {
		t.Errorf("no line saying the scan of the data root hung:\n%s", out)
	}
}
