package main_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/efsfs"
	"github.com/nodeid/nodeid/internal/s3test"
)

// Review r24f (guide: "every file-system phase has a bound"; docs/cli.md
// "A hung data root", --fs-timeout "bound of each file-system phase on the
// data root"): the start-up checks of the data root run on main's goroutine
// with no bound: checkTempDirPlacement -> checkDataRoot (os.Stat, access;
// run.go:44, where this test blocks), then newSession's checkDataRoot and
// checkDataOwner (datadir.CheckOwner: open the root, read
// nodeid-cluster.json). A data
// root that stops answering before the task starts (EFS unreachable at boot)
// leaves nodeid-init blocked for ever: no exit 7, no error line, no metrics
// endpoint yet, and ECS never replaces the task (only `health` fails).
//
// Schedule: the FUSE data root hangs every operation; `nodeid-init run`
// starts with --fs-timeout 2 s. Wanted: it exits (7, a hung data root)
// within the bound plus a few seconds, having taken no lease.
func TestReviewR24fDataRootHungAtStartUpIsNotBounded(t *testing.T) {
	f := efsfs.MountT(t, efsfs.Profile{})
	c := newCluster(t, s3test.NewFake(t), 1)
	addr := freeAddr(t)
	hung := f.HangAll()
	tk := c.runTask("starter", fsHangEnv(f, addr)...)
	t.Cleanup(f.Release) // runs first: lets the blocked stat return, then the task is killed
	select {
	case <-hung:
	case <-time.After(10 * time.Second):
		t.Fatalf("the task never reached the data root:\n%s", tk.out.String())
	}
	select {
	case <-tk.done:
	case <-time.After(15 * time.Second):
		// Where it is blocked: the Go runtime dumps its goroutines on SIGQUIT.
		_ = tk.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-tk.done:
		case <-time.After(2 * time.Second):
		}
		t.Fatalf("nodeid-init still blocked 15 s after the data root stopped answering at start-up (--fs-timeout 2s): "+
			"the start-up checks of the data root have no bound; output so far:\n%s", tk.out.String())
	}
	if tk.code != exitFSHung {
		t.Errorf("exit code %d, want %d (a hung data root):\n%s", tk.code, exitFSHung, tk.out.String())
	}
	if !strings.Contains(tk.out.String(), "hung") {
		t.Errorf("no line saying the data root hung:\n%s", tk.out.String())
	}
	if rec, err := c.repo().Get(context.Background(), 0); err == nil && rec.Lease.Held() {
		t.Errorf("a lease was taken though the data root was never checked: %+v", rec.Lease)
	}
}
