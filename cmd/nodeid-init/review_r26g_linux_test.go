package main_test

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeid/nodeid/internal/s3test"
)

// stalledWriter reports its identity, then appends to a file in its data
// directory every 20 ms until killed.
const stalledWriter = `echo "$NODE_ID $NODE_VERSION $NODE_PREVIOUS_GRACEFUL" > "$REPORT"; while :; do echo x >> "$NODE_DATA_DIR/w.log"; sleep 0.02; done`

// procState is the state letter of /proc/PID/stat (R, S, T, Z...), or 0.
func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// Review r26g (invariants 1 and 4): run puts CMD in a process group of its
// own (Setpgid) and takes no job-control stop signal (signals.go handles
// SIGTERM/INT/QUIT, HUP/USR1/USR2/WINCH and PIPE only). A job-control stop
// (Ctrl-Z at a terminal, or SIGTTOU when nodeid-init, a background job,
// logs to a terminal with `stty tostop`; a SIGTSTP that an init in front of
// it forwards, e.g. from `docker kill -s TSTP`: not verified here) goes to
// nodeid-init's process group, which CMD is not in: SIGTSTP's default action
// stops nodeid-init, and with it the renewals and the watchdog (the fence),
// while CMD runs on, unsupervised. Unlike a SIGSTOP of the whole task (the
// documented "holder paused" row of docs/design.md), this stop is catchable
// and reaches the supervisor only.
//
// Schedule (L = 2 s, R = 500 ms): holder = nodeid-init run -- sh (appends to
// node-0/v1/w.log every 20 ms); SIGTSTP to nodeid-init's pid (what the
// terminal sends to the foreground group); nodeid-init stops (state T), no
// renewal, no self-fence; after L the lease expires by S3's clock; a
// successor takes node 0 at v2; the stale CMD still appends to node-0/v1.
// Expected: either nodeid-init is not stopped (it keeps renewing, and the
// successor waits), or CMD is dead before the successor holds v2.
func TestReviewR26gJobControlStopOfTheSupervisorLeavesCMDWritingBesideItsSuccessor(t *testing.T) {
	c := newCluster(t, s3test.NewFake(t), 1)
	holder := c.start("holder", nil, "run", "--", "sh", "-c", stalledWriter)
	if _, v, _ := holder.identity(t, 20*time.Second); v != 1 {
		t.Fatalf("holder got v%d, want v1", v)
	}
	log := filepath.Join(c.root, "node-0", "v1", "w.log")
	waitFor(t, 5*time.Second, "the command to write "+log, func() bool { return grows(log, 200*time.Millisecond) })
	pid := holder.cmd.Process.Pid
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) // before the harness's SIGKILL
	if err := syscall.Kill(pid, syscall.SIGTSTP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	stopped := procState(pid) == 'T'
	t.Logf("nodeid-init after SIGTSTP: state %q", procState(pid))

	succ := c.runTask("succ")
	var got bool
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(succ.report); err == nil && strings.HasPrefix(string(b), "0 2 ") {
			got = true
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !got {
		if stopped {
			t.Fatalf("nodeid-init is stopped but no successor took node 0 within 15 s: the setup is not the one this test is about")
		}
		return // the supervisor kept renewing: no successor, no overlap
	}
	if grows(log, 500*time.Millisecond) {
		t.Errorf("the successor holds node 0 at v2 while the stale holder's command still appends to %s: nodeid-init (state %q after SIGTSTP) was stopped by a job-control signal, its CMD in another process group was not, and nothing fenced it",
			log, procState(pid))
	}
}

// ttouJob is an interactive shell's job control: nodeid-init runs as a
// background job with its stderr on the terminal; once CMD runs, the user
// sets `stty tostop` (or had it set). nodeid-init's next log line (a debug
// renewal line here; a "peers file updated" or "renewal failed" line in
// production) is a write to the terminal from a background process group.
const ttouJob = `set -m
"$BIN" run -- sh -c "$WRITER" &
echo $! > "$DIR/supervisor.pid"
while [ ! -s "$REPORT" ]; do sleep 0.05; done
sleep 0.5
stty tostop
sleep 300 # the session leader stays: its exit would hang up the terminal
`

// Review r26g (invariants 1 and 4; "a stuck stderr/log pipe"): the same
// hole as above, reached through a log write. The log writer never blocks
// on a full pipe (logwriter.go), but a write(2) to a terminal from a
// background job with TOSTOP raises SIGTTOU, whose default action (Go
// leaves it to the system) stops the whole of nodeid-init: renewals, the
// watchdog and the fence. CMD, in its own process group, is not stopped.
//
// Schedule (L = 2 s, R = 500 ms, log level debug): bash -m on a pty runs
// nodeid-init run -- sh (appends to node-0/v1/w.log) in the background;
// `stty tostop`; nodeid-init's next log line: SIGTTOU, state T; the lease
// expires; a successor takes node 0 at v2; the stale CMD still appends to
// node-0/v1.
func TestReviewR26gLogWriteToATerminalStopsTheSupervisorButNotCMD(t *testing.T) {
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pty: %v", err)
	}
	defer ptmx.Close()
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	pts, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pts.Close()
	go func() { _, _ = io.Copy(io.Discard, ptmx) }() // the terminal shows everything

	c := newCluster(t, s3test.NewFake(t), 1)
	report := filepath.Join(c.dir, "holder.report")
	sh := exec.Command("bash", "-c", ttouJob)
	sh.Env = append(append([]string{}, c.env...), "NODEID_TASK_ID=holder", "REPORT="+report, "DIR="+c.dir,
		"BIN="+binary, "WRITER="+stalledWriter, "NODEID_LOG_LEVEL=debug")
	sh.Stdin, sh.Stdout, sh.Stderr = pts, pts, pts
	sh.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	t.Cleanup(func() {
		if pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = syscall.Kill(-sh.Process.Pid, syscall.SIGKILL) // bash and its sleep (Setsid: its own group)
		_ = sh.Wait()
	})
	waitFor(t, 20*time.Second, "the holder's command to report", func() bool {
		b, err := os.ReadFile(report)
		return err == nil && strings.HasPrefix(string(b), "0 1 ")
	})
	waitFor(t, 5*time.Second, "the supervisor's pid", func() bool {
		b, err := os.ReadFile(filepath.Join(c.dir, "supervisor.pid"))
		if err == nil {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		return pid > 0
	})
	log := filepath.Join(c.root, "node-0", "v1", "w.log")
	waitFor(t, 5*time.Second, "the command to write "+log, func() bool { return grows(log, 200*time.Millisecond) })
	time.Sleep(1500 * time.Millisecond) // stty tostop, then a debug line every R
	stopped := procState(pid) == 'T'
	t.Logf("nodeid-init after stty tostop: state %q", procState(pid))

	succ := c.runTask("succ")
	var got bool
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(succ.report); err == nil && strings.HasPrefix(string(b), "0 2 ") {
			got = true
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !got {
		if stopped {
			t.Fatalf("nodeid-init is stopped but no successor took node 0 within 15 s: the setup is not the one this test is about")
		}
		return // the supervisor kept renewing: no successor, no overlap
	}
	if grows(log, 500*time.Millisecond) {
		t.Errorf("the successor holds node 0 at v2 while the stale holder's command still appends to %s: nodeid-init (state %q) was stopped by SIGTTOU on a log write to the terminal, its CMD in another process group was not, and nothing fenced it",
			log, procState(pid))
	}
}
