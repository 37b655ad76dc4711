package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/efsfs"
	"github.com/nodeid/nodeid/internal/s3test"
)

// Review r26e (docs/cli.md "A hung data root", exit 7; invariant 4's stop
// sequence): awaitHangExit only helps once fsHung is set, i.e. once the
// --fs-timeout bound of the hung output write has passed. When CMD exits
// while a peers-file rewrite is already hung but its bound has not passed
// yet, run's stop sequence neither waits for nor bounds that write: stopRest
// (kills the tree only), syncfs, release, exit with CMD's code. The lease is
// released gracefully with our write still in flight on a hung file system
// (it may land after the successor started), and the exit is not 7.
//
// Schedule: cluster of 2, holder with --peers-file on a FUSE mount,
// --fs-timeout 20 s; once CMD runs the mount's fsync hangs; a second task
// joins, followPeers rewrites the peers file and its fsync hangs; 1 s later
// CMD's leader dies (SIGTERM from outside, exit 143), well inside the bound.
func TestReviewR26eCMDExitWhileAPeersRewriteHangsReleasesTheLeaseWithTheWriteInFlight(t *testing.T) {
	f := efsfs.MountT(t, efsfs.Profile{})
	t.Cleanup(f.Release)
	c := newCluster(t, s3test.NewFake(t), 2)
	tk := c.start("holder", []string{"NODEID_PEERS_FILE=" + filepath.Join(f.Dir, "peers.json"), "NODEID_FS_TIMEOUT=20s", "NODEID_DATA_ROOT=",
		"NODEID_LEASE_FILE=" + filepath.Join(c.dir, "lease.json")},
		"run", "--", "sh", "-c", childScript)
	tk.identity(t, 20*time.Second)
	before := f.Count(efsfs.OpFsync)
	f.HangFsync()
	other := c.start("other", []string{"NODEID_LEASE_FILE=" + filepath.Join(c.dir, "other.json")}, "run", "--", "sh", "-c", childScript)
	t.Cleanup(func() { _ = other.cmd.Process.Kill() })
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) && f.Count(efsfs.OpFsync) == before {
		time.Sleep(20 * time.Millisecond)
	}
	if f.Count(efsfs.OpFsync) == before {
		t.Fatalf("the peers rewrite never reached fsync:\n%s", tk.out.String())
	}
	time.Sleep(time.Second)
	killLeader(t, tk.cmd.Process.Pid)
	code := tk.wait(t, 40*time.Second)
	out := tk.out.String()
	succ := c.start("succ", []string{"NODEID_LEASE_FILE=" + filepath.Join(c.dir, "succ.json")}, "run", "--", "sh", "-c", childScript)
	t.Cleanup(func() { _ = succ.cmd.Process.Kill() })
	id, _, graceful := succ.identity(t, 30*time.Second)
	t.Logf("holder exit %d; successor took %d, previous_graceful=%v", code, id, graceful)
	if code != 7 || graceful || strings.Contains(out, "released node id") {
		t.Errorf("holder exit %d (want 7), successor previous_graceful=%v (want false): the lease was released while the peers-file write hung on the file system:\n%s", code, graceful, out)
	}
}

// killLeader sends SIGTERM to CMD's leader (`sleep`, exec'd by sh), the
// child of nodeid-init (pid), from outside: CMD exits 143 on its own.
func killLeader(t *testing.T, pid int) {
	t.Helper()
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	n := 0
	for _, p := range tasks {
		b, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil && syscall.Kill(c, syscall.SIGTERM) == nil {
				n++
			}
		}
	}
	if n == 0 {
		t.Fatalf("no child of nodeid-init (pid %d) to kill", pid)
	}
}

// Review r26e (invariant 5): underDataRoot finds a directory's place in the
// data root by walking up with `..`, but `..` of a mount's root leads to
// the mount point's parent: the operator's bind mount of a directory inside
// the data root (a second volume mount of the same EFS at a subdirectory,
// /etc/broker <- R/conf) is never placed inside the data root. The output
// is taken for an operator's path, opened following every symlink, and a
// symlink the tenant planted in R/conf leads the write out of the data root.
//
// Schedule: data root R; R/conf a real directory; the tenant plants
// R/conf/sub -> OUTSIDE; nodeid-init runs in a mount namespace where
// M (outside R) is a bind mount of R/conf, with --template
// src:M/sub/broker.properties. Wanted: exit 2 or nothing written outside R;
// got: OUTSIDE/broker.properties.
func TestReviewR26eOutputThroughABindMountOfADirectoryInsideTheDataRootFollowsAPlantedSymlinkOut(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, s3test.NewFake(t), 1)
	outside := t.TempDir()
	conf := filepath.Join(c.root, "conf")
	if err := os.Mkdir(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(conf, "sub")); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(c.dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	tmpl := filepath.Join(c.dir, "a.tmpl")
	if err := os.WriteFile(tmpl, []byte("id={{.NodeID}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `mount --bind "$1" "$2" && shift 2 && exec "$@"`
	tk := c.startProgram("node-0", []string{"NODEID_TEMPLATE=" + tmpl + ":" + filepath.Join(mnt, "sub", "broker.properties")},
		"unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", conf, mnt, binary, "run", "--", "sh", "-c", childScript)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && tk.running() {
		if _, err := os.Stat(tk.report); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(tk.report); err != nil && (tk.running() || tk.code != 2) {
		t.Fatalf("node-0 neither started its command nor refused the output (exit %d, want 2):\n%s", tk.code, tk.out.String())
	}
	entries, _ := os.ReadDir(outside)
	for _, e := range entries {
		t.Errorf("wrote %s, outside the data root %s, through the bind mount %s of %s and the symlink %s planted there",
			filepath.Join(outside, e.Name()), c.root, mnt, conf, filepath.Join(conf, "sub"))
	}
	t.Logf("node-0 running=%v exit=%d", tk.running(), tk.code)
}
