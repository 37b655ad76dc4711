package main_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// Review r26c (availability): the peers file and the templates are written
// before the start (beforeStart) with an fsync that no bound watches: only
// the data root's phases are bounded by --fs-timeout. A peers file on a file
// system whose fsync stops answering (not the data root, not the lease
// file's) leaves the task holding and renewing the node ID, /healthz 200,
// with the command never started, for ever: ECS never replaces it and no
// other task can take the ID.
//
// Schedule: lease 2 s, --fs-timeout 2 s; --peers-file on a FUSE mount whose
// fsync hangs from the start; the data root and lease file elsewhere.
func TestReviewR26cHungPeersFileBeforeTheStartHoldsTheIDForever(t *testing.T) {
	f := efsfs.MountT(t, efsfs.Profile{})
	f.HangFsync()
	t.Cleanup(f.Release)
	c := newCluster(t, s3test.NewFake(t), 1)
	addr := freeAddr(t)
	tk := c.start("holder", []string{"NODEID_PEERS_FILE=" + filepath.Join(f.Dir, "peers.json"), "NODEID_FS_TIMEOUT=2s",
		"NODEID_LEASE_FILE=" + filepath.Join(c.dir, "lease.json"), "NODEID_METRICS_ADDR=" + addr},
		"run", "--", "sh", "-c", childScript)
	// Far past every bound: fs-timeout 2 s, lease 2 s.
	select {
	case <-tk.done:
		t.Logf("exited %d", tk.code)
		return
	case <-time.After(15 * time.Second):
	}
	_, started := os.Stat(tk.report)
	status := -1
	if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
		status = resp.StatusCode
		resp.Body.Close()
	}
	t.Errorf("15 s after the start (fs-timeout 2 s, lease 2 s): still running, command started=%v, /healthz %d; a peers file whose fsync hangs holds the node ID for ever:\n%s",
		started == nil, status, tk.out.String())
}

// Review r26c (invariant 4 bound, availability): with the default lease
// file, run's last deferred step after a loss closes the lease.lock it
// holds in $TMPDIR/nodeid-<uid> (or removes its private directory). On a
// $TMPDIR whose file system stopped answering that close (FUSE flush) or
// unlink does not return: nothing bounds it, unlike the lease-file writes.
//
// Schedule: lease 2 s; TMPDIR on a FUSE mount (default lease and peers
// files there); the mount hangs while the command runs. Wanted: exit 3
// within the documented bounds (here well under 40 s).
func TestReviewR26cHungTempDirDefaultLeaseFileExitIsBounded(t *testing.T) {
	f := efsfs.MountT(t, efsfs.Profile{})
	c := newCluster(t, s3test.NewFake(t), 1)
	tk := c.start("holder", []string{"TMPDIR=" + f.Dir, "NODEID_FS_TIMEOUT=2s"}, "run", "--", "sh", "-c", childScript)
	tk.identity(t, 20*time.Second)
	f.HangAll()
	t.Cleanup(f.Release)
	select {
	case <-tk.done:
		t.Logf("exit %d", tk.code)
		if tk.code != 3 {
			t.Errorf("exit %d, want 3:\n%s", tk.code, tk.out.String())
		}
	case <-time.After(40 * time.Second):
		t.Errorf("still running 40 s after $TMPDIR (the default lease file's) hung, lease 2 s:\n%s", tk.out.String())
	}
}

// r26c.1 for renew: its lease file on a file system that stops answering.
// The renewal's lease-file write hangs, the watchdog fences at the
// deadline, and the provider's EventLost write hangs too, so OnLost never
// runs: renew must still exit 3, within L + 2 s of the loss (plus the
// fence's 1 s), not wait for a loss report that never comes.
func TestRenewHungLeaseFileExitsWithinTheLossBound(t *testing.T) {
	f := efsfs.MountT(t, efsfs.Profile{})
	c := newCluster(t, s3test.StartVersity(t), 1)
	envFile := filepath.Join(t.TempDir(), "node.env")
	env := []string{"NODEID_ENV_FILE=" + envFile, "NODEID_LEASE_FILE=" + filepath.Join(f.Dir, "lease.json"),
		"NODEID_FS_TIMEOUT=2s", "NODEID_LEASE_DURATION=4s", "NODEID_RENEW_INTERVAL=1s"}
	if code := c.start("task-a", env, "acquire").wait(t, 20*time.Second); code != 0 {
		t.Fatalf("acquire exited %d", code)
	}
	tk := c.start("task-a", env, "renew")
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(tk.out.String(), "renewing adopted lease") {
		if time.Now().After(deadline) || !tk.running() {
			t.Fatalf("renew did not adopt (exit %d):\n%s", tk.code, tk.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.HangAll()
	t.Cleanup(f.Release)
	var lost time.Time
	for deadline = time.Now().Add(20 * time.Second); lost.IsZero(); time.Sleep(20 * time.Millisecond) {
		if strings.Contains(tk.out.String(), "lease lost") {
			lost = time.Now()
		} else if time.Now().After(deadline) || !tk.running() {
			t.Fatalf("no loss logged (running=%v exit %d):\n%s", tk.running(), tk.code, tk.out.String())
		}
	}
	code := tk.wait(t, 60*time.Second)
	took := time.Since(lost)
	t.Logf("loss -> exit %v (exit %d)", took.Round(100*time.Millisecond), code)
	if code != 3 {
		t.Errorf("exit %d, want 3:\n%s", code, tk.out.String())
	}
	if bound := 1*time.Second + 4*time.Second + 2*time.Second + time.Second; took > bound {
		t.Errorf("exit came %v after the loss, bound 1 s + L + 2 s (+1 s slack) = %v:\n%s", took.Round(100*time.Millisecond), bound, tk.out.String())
	}
}

// r26c.2: a stop requested while an output write hangs before the start
// ends the task at once (exit 7, the lease left to expire), not after
// --fs-timeout (here 1 m).
func TestHungPeersFileWriteEndsOnSIGTERM(t *testing.T) {
	f := efsfs.MountT(t, efsfs.Profile{})
	f.HangFsync()
	t.Cleanup(f.Release)
	c := newCluster(t, s3test.NewFake(t), 1)
	tk := c.start("holder", []string{"NODEID_PEERS_FILE=" + filepath.Join(f.Dir, "peers.json"), "NODEID_FS_TIMEOUT=1m",
		"NODEID_LEASE_FILE=" + filepath.Join(c.dir, "lease.json")},
		"run", "--", "sh", "-c", childScript)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(tk.out.String(), "template rendered") && !strings.Contains(tk.out.String(), "acquired") {
		if time.Now().After(deadline) || !tk.running() {
			t.Fatalf("not acquired (exit %d):\n%s", tk.code, tk.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second) // in the peers file's fsync
	if err := tk.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	code := tk.wait(t, 30*time.Second)
	took := time.Since(sent)
	t.Logf("SIGTERM -> exit %v (exit %d)", took.Round(100*time.Millisecond), code)
	if code != 7 || took > 6*time.Second {
		t.Errorf("exit %d %v after SIGTERM; want 7 within 1 s + 3 s (+2 s slack):\n%s", code, took.Round(100*time.Millisecond), tk.out.String())
	}
	if _, err := os.Stat(tk.report); err == nil {
		t.Errorf("the command was started")
	}
}
