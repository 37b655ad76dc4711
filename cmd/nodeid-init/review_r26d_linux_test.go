package main_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/efsfs"
	"github.com/nodeid/nodeid/internal/s3test"
)

// Review r26d (invariant 4 / docs/cli.md's exit table): a peers-file
// rewrite that hangs while CMD runs is abandoned (abandonOnHang): it
// SIGKILLs CMD's tree, then leaves the lease to expire and exits 7. But
// run's main loop sees CMD exit (of that SIGKILL), finds no loss
// (lossErr is nil: a hang is not a loss) and takes the ordinary stop
// sequence: stopRest, syncfs, release(). Whichever of the two reaches the
// provider first decides: a graceful release after a hang (the hung write
// may still land, the successor may hard-link at once), and/or an exit
// code of CMD's 137 instead of 7.
//
// Schedule: cluster of 2, holder with --peers-file on a FUSE mount,
// --fs-timeout 2 s; once CMD runs the mount's fsync hangs; a second task
// joins, the peers table changes, followPeers rewrites the peers file and
// its fsync hangs; 2 s later the bound fires.
func TestReviewR26dHungPeersRewriteWhileCMDRunsExits7WithoutRelease(t *testing.T) {
	f := efsfs.MountT(t, efsfs.Profile{})
	t.Cleanup(f.Release)
	c := newCluster(t, s3test.NewFake(t), 2)
	tk := c.start("holder", []string{"NODEID_PEERS_FILE=" + filepath.Join(f.Dir, "peers.json"), "NODEID_FS_TIMEOUT=2s", "NODEID_DATA_ROOT=",
		"NODEID_LEASE_FILE=" + filepath.Join(c.dir, "lease.json")},
		"run", "--", "sh", "-c", childScript)
	tk.identity(t, 20*time.Second)
	f.HangFsync()
	other := c.start("other", []string{"NODEID_LEASE_FILE=" + filepath.Join(c.dir, "other.json")}, "run", "--", "sh", "-c", childScript)
	t.Cleanup(func() { _ = other.cmd.Process.Kill() })
	code := tk.wait(t, 30*time.Second)
	out := tk.out.String()
	// The successor takes ID 1 (0 is other's): after a hang it must find
	// the lease expired, not released.
	succ := c.start("succ", []string{"NODEID_LEASE_FILE=" + filepath.Join(c.dir, "succ.json")}, "run", "--", "sh", "-c", childScript)
	t.Cleanup(func() { _ = succ.cmd.Process.Kill() })
	id, _, graceful := succ.identity(t, 20*time.Second)
	t.Logf("holder exit %d; successor took %d, previous_graceful=%v", code, id, graceful)
	if code != 7 || graceful || strings.Contains(out, "released node id") || strings.Contains(out, "command exited") {
		t.Errorf("holder exit %d (want 7), successor previous_graceful=%v (want false); a hang must exit 7 without a release and without the stop sequence of a CMD exit:\n%s", code, graceful, out)
	}
}
