package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/efsfs"
	"github.com/nodeid/nodeid/internal/s3test"
)

// Review r26f (invariant 4): with /proc of another PID namespace (`unshare
// --pid` without --mount-proc, which run supports with a warning), the
// fence (fence.kill -> killTree) only sends SIGKILL to the process group
// -pid: readProcs fails, so neither the descendants nor the leader itself
// are killed. killTree's comment says "the leader included wherever its
// group", and docs/cli.md says only that what CMD *leaves behind* cannot be
// found; but a CMD whose leader moved to another group (setpgid, allowed
// for a non-session-leader; leaderLeavesGroup) is not hit at all. Only
// PDEATHSIG kills it, when nodeid-init exits; and nodeid-init does not exit
// while the loss is not handled: with its lease file on a file system that
// stopped answering, the EventLost write waits on fileMu behind the hung
// renewal write, sess.lost is never sent, the leader never exits, and run's
// loop waits on nothing else.
//
// Schedule (L = 2 s, R = 500 ms): holder = unshare --pid --fork nodeid-init
// run -- perl leaderLeavesGroup, lease file on a FUSE mount; the mount
// stops answering (15 s per operation); the renewal's lease-file write hangs; the watchdog fences at the
// deadline ("lease lost"): kill(-pid) hits an empty group; a successor
// takes node 0 at v2; the stale leader still appends to node-0/v1.
// The fix: the fence also SIGKILLs the leader's pid (it is not reaped
// before fence.stopped), whatever /proc says; and since review r26i the
// leader, a session leader, cannot leave its group at all: the test asserts
// the kernel refuses the move (EPERM) and that nothing writes after the loss.
func TestReviewR26fLossWithForeignProcLeavesALeaderThatLeftItsGroupWriting(t *testing.T) {
	if out, err := exec.Command("unshare", "--pid", "--fork", "true").CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("cannot create a PID namespace under CI=true: %v %s", err, out)
		}
		t.Skipf("cannot create a PID namespace here: %v %s", err, out)
	}
	f := efsfs.MountT(t, efsfs.Profile{})
	c := newCluster(t, s3test.NewFake(t), 1)
	tk := c.startProgram("holder", []string{"DIR=" + c.dir, "NODEID_LEASE_FILE=" + filepath.Join(f.Dir, "lease.json")},
		"unshare", "--pid", "--fork", binary, "run", "--", "perl", "-e", leaderLeavesGroup)
	_, v, _ := tk.identity(t, 20*time.Second)
	if v != 1 {
		t.Fatalf("holder got v%d, want v1", v)
	}
	if !strings.Contains(tk.out.String(), "another PID namespace") {
		t.Fatalf("no foreign-/proc warning: the setup is not the one this test is about:\n%s", tk.out.String())
	}
	assertRefused(t, filepath.Join(c.dir, "setpgrp.err"), "EPERM", "the leader's move into its child's group")
	leaderLog := filepath.Join(c.root, "node-0", "v1", "leader.log")
	if !grows(leaderLog, 300*time.Millisecond) {
		t.Fatalf("the leader does not write %s", leaderLog)
	}
	// Every operation now takes 15 s and ignores the kernel's interrupt,
	// as a hard NFS mount does for all but SIGKILL (efsfs's HangAll gives
	// up on any signal: Go's own make it return EINTR within seconds).
	f.SetProfile(efsfs.Profile{Meta: 15 * time.Second, Data: 15 * time.Second})
	waitFor(t, 20*time.Second, "the holder to log the loss", func() bool { return strings.Contains(tk.out.String(), "lease lost") })

	succ := c.start("succ", []string{"NODEID_LEASE_FILE=" + filepath.Join(t.TempDir(), "lease.json")}, "run", "--", "sh", "-c", childScript)
	waitFor(t, 30*time.Second, "the successor to acquire node 0", func() bool {
		return strings.Contains(succ.out.String(), `msg="acquired node id"`) && strings.Contains(succ.out.String(), "version=2")
	})
	if grows(leaderLog, 500*time.Millisecond) {
		t.Errorf("the stale holder's command (its leader) still writes %s after the loss, while the successor holds node 0 at v2 (holder running: %v)",
			leaderLog, tk.running())
	}
	// Its copy of v1 may fail: the stale writers change v1 under the copy.
	time.Sleep(3 * time.Second)
	if grows(leaderLog, 500*time.Millisecond) {
		t.Errorf("the stale holder's command still writes %s 3 s later (holder running: %v)", leaderLog, tk.running())
	}
}
