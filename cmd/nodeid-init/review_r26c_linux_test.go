package main_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/efsfs"
	"github.com/nodeid/nodeid/internal/s3test"
)

// Review r26c: docs/cli.md says a command that lost its lease "exits only
// once the provider has finished the loss, at most L + 2 s", after the kill
// (at most 1 s + 5 s). A lease file whose file system hangs blocks the
// provider's EventLost write, so OnLost never runs and the loss is never
// "handled": every awaitLossHandled then waits its own L + 2 s, and run
// calls it in lost(), in closeOutputs (new in 00e9863) and in its deferred
// awaitLossHandled, after stopWaiting's --fs-timeout.
//
// Schedule (L = 4 s, R = 1 s, --fs-timeout 2 s): the holder runs with its
// lease file on a FUSE mount; the mount stops answering; the renewal's
// lease-file write hangs, the watchdog fences at the deadline ("lease
// lost"); from that line the exit must come within 1 + 5 + L + 2 = 12 s.
func TestReviewR26cHungLeaseFileExitWithinDocumentedBound(t *testing.T) {
	f := efsfs.MountT(t, efsfs.Profile{})
	c := newCluster(t, s3test.StartVersity(t), 1)
	tk := c.start("holder", []string{"NODEID_LEASE_FILE=" + filepath.Join(f.Dir, "lease.json"), "NODEID_FS_TIMEOUT=2s",
		"NODEID_LEASE_DURATION=4s", "NODEID_RENEW_INTERVAL=1s"},
		"run", "--", "sh", "-c", childScript)
	tk.identity(t, 20*time.Second)
	f.HangAll()
	t.Cleanup(f.Release)
	hung := time.Now()
	var lost time.Time
	for lost.IsZero() {
		if strings.Contains(tk.out.String(), "lease lost") {
			lost = time.Now()
			break
		}
		select {
		case <-tk.done:
			t.Fatalf("exited %d before logging the loss:\n%s", tk.code, tk.out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Since(hung) > 20*time.Second {
			t.Fatalf("no loss 20 s after the hang:\n%s", tk.out.String())
		}
	}
	code := tk.wait(t, 60*time.Second)
	took := time.Since(lost)
	t.Logf("hang -> loss %v, loss -> exit %v (exit %d)", lost.Sub(hung).Round(100*time.Millisecond), took.Round(100*time.Millisecond), code)
	if code != 3 {
		t.Errorf("exit %d, want 3", code)
	}
	if bound := 12 * time.Second; took > bound {
		t.Errorf("exit 3 came %v after the loss, documented bound 1 s + 5 s + L + 2 s = %v:\n%s", took.Round(100*time.Millisecond), bound, tk.out.String())
	}
}
