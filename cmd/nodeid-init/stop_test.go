package main_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// These tests check that run releases a lease only once every process the
// command started is gone: a release tells the successor it may hard-link
// the data directory, so nothing of ours may write to it afterwards.

// helper starts a process that appends to $NODE_DATA_DIR/NAME.log every
// 20 ms and writes its pid to $DIR/NAME.pid. setsid takes it out of the
// command's process group; ignoreTerm makes it survive a forwarded SIGTERM.
func helper(name string, setsid, ignoreTerm bool) string {
	loop := `echo $$ > "$DIR/` + name + `.pid"; while :; do echo x >> "$NODE_DATA_DIR/` + name + `.log"; sleep 0.02; done`
	if ignoreTerm {
		loop = `trap '' TERM; ` + loop
	}
	if setsid {
		return `setsid sh -c '` + strings.ReplaceAll(loop, `'`, `'\''`) + `' >/dev/null 2>&1 &
while [ ! -s "$DIR/` + name + `.pid" ]; do sleep 0.01; done
`
	}
	// A sh -c child, not a subshell: $$ must be the helper's own pid. Its
	// output goes elsewhere, or the test would wait for it to close the pipe.
	return `sh -c '` + strings.ReplaceAll(loop, `'`, `'\''`) + `' >/dev/null 2>&1 &
while [ ! -s "$DIR/` + name + `.pid" ]; do sleep 0.01; done
`
}

const report = `echo "$NODE_ID $NODE_VERSION $NODE_PREVIOUS_GRACEFUL" > "$REPORT"
`

// helperPID reads a helper's pid and makes sure the test does not leave it
// running, whatever happens.
func helperPID(t *testing.T, c *cluster, name string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, name+".pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return pid
}

// assertGone: the helper is not merely killed but reaped, so it can write
// nothing more.
func assertGone(t *testing.T, name string, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("helper %s (pid %d) still exists after nodeid-init exited (kill 0: %v)", name, pid, err)
	}
}

// assertStill: the file does not grow any more.
func assertStill(t *testing.T, path string) {
	t.Helper()
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if after.Size() != before.Size() {
		t.Errorf("%s grew from %d to %d bytes after nodeid-init exited", path, before.Size(), after.Size())
	}
}

// assertOrder: the log says the processes were gone before the release.
func assertOrder(t *testing.T, out string) {
	t.Helper()
	gone := strings.Index(out, "processes of the command gone")
	released := strings.Index(out, "released node id")
	if gone < 0 || released < 0 || gone > released {
		t.Errorf("want \"processes of the command gone\" before \"released node id\" (at %d, %d)", gone, released)
	}
}

func TestRunKillsWhatTheCommandLeftBeforeReleasing(t *testing.T) {
	c := newCluster(t, s3test.NewFake(t), 1)
	goFile := filepath.Join(c.dir, "go")
	script := helper("bg", false, false) + helper("daemon", true, false) + report +
		`while [ ! -e "$GO" ]; do sleep 0.02; done; exit 0`
	holder := c.start("holder", []string{"DIR=" + c.dir, "GO=" + goFile}, "run", "--", "sh", "-c", script)
	holder.identity(t, 20*time.Second)
	bg, daemon := helperPID(t, c, "bg"), helperPID(t, c, "daemon")
	waiter := c.runTask("waiter")
	waitFor(t, 20*time.Second, "the waiter to wait", func() bool { return strings.Contains(waiter.out.String(), "no node id free, waiting") })

	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := holder.wait(t, 15*time.Second); code != 0 {
		t.Fatalf("holder exited %d, want the command's 0", code)
	}
	assertGone(t, "bg", bg)
	assertGone(t, "daemon", daemon)
	assertOrder(t, holder.out.String())

	// The successor links v1's files: nothing of the holder appends to them.
	_, v, graceful := waiter.identity(t, 10*time.Second)
	if v != 2 || !graceful {
		t.Fatalf("waiter got v%d graceful=%v, want v2 after a release", v, graceful)
	}
	v1, err := os.Stat(filepath.Join(c.root, "node-0", "v1", "bg.log"))
	if err != nil {
		t.Fatal(err)
	}
	v2, err := os.Stat(filepath.Join(c.root, "node-0", "v2", "bg.log"))
	if err != nil || !os.SameFile(v1, v2) {
		t.Fatalf("v2/bg.log is not a hard link of v1's (%v)", err)
	}
	assertStill(t, filepath.Join(c.root, "node-0", "v2", "bg.log"))
	assertStill(t, filepath.Join(c.root, "node-0", "v2", "daemon.log"))
}

func TestForwardedSigtermKillsChildrenThatIgnoreIt(t *testing.T) {
	c := newCluster(t, s3test.NewFake(t), 1)
	script := helper("bg", false, true) + report + `while :; do sleep 0.02; done`
	tk := c.start("holder", []string{"DIR=" + c.dir}, "run", "--", "sh", "-c", script)
	tk.identity(t, 20*time.Second)
	bg := helperPID(t, c, "bg")
	if err := tk.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The command dies of SIGTERM at once; the default stop timeout is 25 s.
	if code := tk.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	assertGone(t, "bg", bg)
	assertOrder(t, tk.out.String())
	assertStill(t, filepath.Join(c.root, "node-0", "v1", "bg.log"))
	rec, err := c.repo().Get(context.Background(), 0)
	if err != nil || rec.Lease.Held() {
		t.Fatalf("lease not released: %+v %v", rec.Lease, err)
	}
}

func TestLeaseLossKillsHelpersThatLeftTheGroup(t *testing.T) {
	c := newCluster(t, s3test.NewFake(t), 1)
	script := helper("daemon", true, false) + report + `while :; do sleep 0.02; done`
	tk := c.start("holder", []string{"DIR=" + c.dir}, "run", "--", "sh", "-c", script)
	id, v, _ := tk.identity(t, 20*time.Second)
	daemon := helperPID(t, c, "daemon")
	body := fmt.Sprintf(`{"taskId":"intruder","timestamp":%d,"nodeInstance":{"id":%d,"version":%d},"knownVersionMappings":{"mappingsByNodeId":{}}}`,
		time.Now().Add(time.Hour).UnixMilli(), id, v)
	putObject(t, c.srv, "e2e/"+nodeid.LeaseKey("", id), body, map[string]string{"taskid": "intruder", "version": fmt.Sprint(v), "acquirable": "true"})
	if code := tk.wait(t, 10*time.Second); code != 3 {
		t.Fatalf("exit code %d after the lease was overwritten, want 3", code)
	}
	assertGone(t, "daemon", daemon)
	assertStill(t, filepath.Join(c.root, "node-0", "v1", "daemon.log"))
}

// run is a subreaper: the orphans it inherits while the command runs must
// not pile up as zombies.
func TestOrphansAreReapedWhileTheCommandRuns(t *testing.T) {
	c := newCluster(t, s3test.NewFake(t), 1)
	script := `(sh -c 'echo $$ > "$DIR/orphan.pid"' >/dev/null 2>&1 &); while [ ! -s "$DIR/orphan.pid" ]; do sleep 0.01; done;` + report + `exec sleep 300`
	tk := c.start("holder", []string{"DIR=" + c.dir}, "run", "--", "sh", "-c", script)
	tk.identity(t, 20*time.Second)
	pid := helperPID(t, c, "orphan")
	waitFor(t, 3*time.Second, "the orphan to be reaped", func() bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) })
}

// leaderLeavesGroup is a command (perl) whose leader forks a child into a
// group of its own, then tries to move itself into that group. Since run
// starts CMD in a session of its own, the leader is a session leader and
// the kernel refuses (EPERM, written to $DIR/setpgrp.err); before, it left
// nothing in the group run created. Both append to logs in the data
// directory. With IGNORE_TERM set they ignore SIGTERM.
const leaderLeavesGroup = `
$SIG{TERM} = 'IGNORE' if $ENV{IGNORE_TERM};
my $c = fork();
if ($c == 0) {
	setpgrp(0, 0);
	open(P, ">", "$ENV{DIR}/grp.pid"); print P "$$\n"; close P;
	while (1) { open(F, ">>", "$ENV{NODE_DATA_DIR}/grp.log"); print F "x\n"; close F; select(undef, undef, undef, 0.02); }
}
select(undef, undef, undef, 0.3);
if (!setpgrp(0, $c)) { my $e = $!{EPERM} ? "EPERM" : "$!"; open(E, ">", "$ENV{DIR}/setpgrp.err"); print E "$e\n"; close E; }
open(P, ">", "$ENV{DIR}/leader.pid"); print P "$$\n"; close P;
open(R, ">", $ENV{REPORT}); print R "$ENV{NODE_ID} $ENV{NODE_VERSION} $ENV{NODE_PREVIOUS_GRACEFUL}\n"; close R;
while (1) { open(F, ">>", "$ENV{NODE_DATA_DIR}/leader.log"); print F "x\n"; close F; select(undef, undef, undef, 0.02); }
`

// On a loss run used to SIGKILL the process group -pid and then wait for
// the leader without a bound. A leader that had moved to another group was
// not hit, so run never exited and the command kept writing its data
// directory while a successor held the node. Now the leader cannot leave
// (its own session) and the whole tree dies at once; run exits 3.
func TestLeaseLossKillsALeaderThatLeftItsGroup(t *testing.T) {
	c := newCluster(t, s3test.NewFake(t), 1)
	tk := c.start("holder", []string{"DIR=" + c.dir}, "run", "--", "perl", "-e", leaderLeavesGroup)
	id, v, _ := tk.identity(t, 20*time.Second)
	leader, grp := helperPID(t, c, "leader"), helperPID(t, c, "grp")
	assertRefused(t, filepath.Join(c.dir, "setpgrp.err"), "EPERM", "the leader's move into its child's group")
	body := fmt.Sprintf(`{"taskId":"intruder","timestamp":%d,"nodeInstance":{"id":%d,"version":%d},"knownVersionMappings":{"mappingsByNodeId":{}}}`,
		time.Now().Add(time.Hour).UnixMilli(), id, v)
	putObject(t, c.srv, "e2e/"+nodeid.LeaseKey("", id), body, map[string]string{"taskid": "intruder", "version": fmt.Sprint(v), "acquirable": "true"})
	if code := tk.wait(t, 10*time.Second); code != 3 {
		t.Fatalf("exit code %d after the lease was overwritten, want 3", code)
	}
	assertGone(t, "leader", leader)
	assertGone(t, "grp", grp)
	assertStill(t, filepath.Join(c.root, "node-0", "v1", "leader.log"))
	assertStill(t, filepath.Join(c.root, "node-0", "v1", "grp.log"))
}

// A forwarded SIGTERM reaches a leader that left its group, and the SIGKILL
// after --stop-timeout reaches it even when it ignores SIGTERM: run used to
// signal only the group, and then waited for the leader forever.
// Now the leader cannot leave (its own session); the child's group is still
// reached.
func TestStopReachesALeaderThatLeftItsGroup(t *testing.T) {
	for _, tc := range []struct {
		name       string
		ignoreTerm string
		want       int
	}{
		{"dies of SIGTERM", "", 0},
		{"ignores SIGTERM", "1", 137},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, s3test.NewFake(t), 1)
			tk := c.start("holder", []string{"DIR=" + c.dir, "IGNORE_TERM=" + tc.ignoreTerm, "NODEID_STOP_TIMEOUT=1s"},
				"run", "--", "perl", "-e", leaderLeavesGroup)
			tk.identity(t, 20*time.Second)
			leader, grp := helperPID(t, c, "leader"), helperPID(t, c, "grp")
			assertRefused(t, filepath.Join(c.dir, "setpgrp.err"), "EPERM", "the leader's move into its child's group")
			if err := tk.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if code := tk.wait(t, 10*time.Second); code != tc.want {
				t.Fatalf("exit code %d after SIGTERM, want %d", code, tc.want)
			}
			assertGone(t, "leader", leader)
			assertGone(t, "grp", grp)
			assertOrder(t, tk.out.String())
			assertStill(t, filepath.Join(c.root, "node-0", "v1", "grp.log"))
		})
	}
}

// assertRefused checks that the file a test's helper wrote holds want: the
// kernel's refusal of the helper's attack step.
func assertRefused(t *testing.T, file, want, what string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if got := strings.TrimSpace(string(b)); err != nil || got != want {
		t.Errorf("%s was not refused by the kernel: %s holds %q (%v), want %q", what, file, got, err, want)
	}
}

// grows reports whether the file grows within d.
func grows(path string, d time.Duration) bool {
	before, err := os.Stat(path)
	if err != nil {
		return false
	}
	time.Sleep(d)
	after, err := os.Stat(path)
	return err == nil && after.Size() > before.Size()
}

const notPID1 = "not PID 1 of a PID namespace"

// PDEATHSIG reaches only the command: if nodeid-init is SIGKILLed (OOM
// killer, kill -9), what stops the rest of the command's tree is the PID
// namespace. As its PID 1 (a container's entrypoint), nodeid-init takes
// every process of the namespace with it. Outside such a namespace nothing
// can, and run warns at start.
func TestRunWarnsWhenNotPID1(t *testing.T) {
	c := newCluster(t, s3test.NewFake(t), 1)
	tk := c.runTask("holder")
	tk.identity(t, 20*time.Second)
	if !strings.Contains(tk.out.String(), notPID1) {
		t.Errorf("no %q warning from a nodeid-init that is not PID 1", notPID1)
	}
}

// As PID 1 of a PID namespace (unshare, as a container runtime does), a
// SIGKILL of nodeid-init leaves nothing of the command writing: not the
// command, not a helper in its group, not one that left it with setsid.
func TestKill9OfTheSupervisorAsPID1StopsEveryWriter(t *testing.T) {
	unshare := []string{"--user", "--map-root-user", "--pid", "--mount-proc", "--kill-child"}
	if out, err := exec.Command("unshare", append(unshare, "true")...).CombinedOutput(); err != nil {
		t.Skipf("cannot create a PID namespace here: %v %s", err, out)
	}
	c := newCluster(t, s3test.NewFake(t), 1)
	script := helper("bg", false, false) + helper("daemon", true, false) + report + `while :; do sleep 0.02; done`
	args := append(unshare, binary, "run", "--", "sh", "-c", script)
	tk := c.startProgram("holder", []string{"DIR=" + c.dir}, "unshare", args...)
	_, v, _ := tk.identity(t, 20*time.Second)
	if strings.Contains(tk.out.String(), notPID1) {
		t.Errorf("%q warning from nodeid-init as PID 1", notPID1)
	}
	// The helpers' pid files hold pids of the namespace: not usable here.
	dir := filepath.Join(c.root, "node-0", fmt.Sprintf("v%d", v))
	for _, name := range []string{"bg", "daemon"} {
		if !grows(filepath.Join(dir, name+".log"), 300*time.Millisecond) {
			t.Fatalf("helper %s does not write", name)
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", tk.cmd.Process.Pid, tk.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	supervisor, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("children of unshare: %q", b)
	}
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", supervisor))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(supervisor, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	tk.wait(t, 5*time.Second)
	waitFor(t, 3*time.Second, "every process of the namespace to be gone", func() bool {
		procs, _ := filepath.Glob("/proc/[0-9]*/ns/pid")
		for _, p := range procs {
			if l, err := os.Readlink(p); err == nil && l == ns {
				return false
			}
		}
		return true
	})
	for _, name := range []string{"bg", "daemon"} {
		assertStill(t, filepath.Join(dir, name+".log"))
	}
}
