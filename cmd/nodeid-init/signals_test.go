package main_test

// Issue 23.3: which signals nodeid-init run forwards, which stop it, and
// that none kills it while its tree runs or its lease is held.

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
)

// trapScript records every signal it gets in $SIGLOG, one name a line; a
// stop signal makes it exit 0 after recording it.
const trapScript = `for s in HUP USR1 USR2 WINCH; do trap "echo $s >> \"\$SIGLOG\"" $s; done
for s in TERM INT QUIT; do trap "echo $s >> \"\$SIGLOG\"; exit 0" $s; done
echo "$NODE_ID $NODE_VERSION $NODE_PREVIOUS_GRACEFUL" > "$REPORT"
while :; do sleep 0.1 & wait $!; done`

func signalsSeen(path string) []string {
	b, _ := os.ReadFile(path)
	return strings.Fields(string(b))
}

func (c *cluster) released(t *testing.T, id int) bool {
	rec, err := c.repo().Get(context.Background(), id)
	if err != nil {
		t.Fatalf("get lease %d: %v", id, err)
	}
	return !rec.Lease.Held()
}

// SIGHUP, SIGUSR1, SIGUSR2 and SIGWINCH reach the command, each time, and
// change nothing else. Before: SIGHUP killed nodeid-init at once (the broker
// SIGKILLed by PDEATHSIG, no release), SIGUSR1/2 were swallowed.
func TestPassSignalsAreForwardedToTheCommand(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 1)
	siglog := filepath.Join(c.dir, "signals")
	tk := c.start("holder", []string{"SIGLOG=" + siglog}, "run", "--", "sh", "-c", trapScript)
	id, _, _ := tk.identity(t, 20*time.Second)
	child := childPID(t, tk)
	var want []string
	for _, ps := range []struct {
		sig  syscall.Signal
		name string
	}{{syscall.SIGHUP, "HUP"}, {syscall.SIGUSR1, "USR1"}, {syscall.SIGUSR2, "USR2"}, {syscall.SIGWINCH, "WINCH"}, {syscall.SIGHUP, "HUP"}} {
		sig, name := ps.sig, ps.name
		want = append(want, name)
		if err := tk.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, name+" recorded by the command", func() bool {
			return !tk.running() || len(signalsSeen(siglog)) >= len(want)
		})
		if !tk.running() {
			t.Fatalf("nodeid-init died of %v (exit %d); the command saw %v", sig, tk.code, signalsSeen(siglog))
		}
	}
	if got := strings.Join(signalsSeen(siglog), " "); got != strings.Join(want, " ") {
		t.Errorf("the command saw %q, want %q", got, strings.Join(want, " "))
	}
	if !processAlive(child) {
		t.Fatal("the command died of a forwarded signal it handles")
	}
	if c.released(t, id) {
		t.Fatal("lease not held after the forwarded signals")
	}
	_ = tk.cmd.Process.Signal(syscall.SIGTERM)
	if code := tk.wait(t, 15*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0", code)
	}
	if !c.released(t, id) {
		t.Error("lease not released after SIGTERM")
	}
}

// SIGTERM, SIGINT and SIGQUIT start the stop sequence: forwarded as is, the
// command stops, the lease is released, exit 0. Before, SIGQUIT killed
// nodeid-init with a stack dump, the command SIGKILLed, no release.
func TestStopSignalsStopTheCommandAndRelease(t *testing.T) {
	for _, ps := range []struct {
		sig  syscall.Signal
		name string
	}{{syscall.SIGTERM, "TERM"}, {syscall.SIGINT, "INT"}, {syscall.SIGQUIT, "QUIT"}} {
		sig, name := ps.sig, ps.name
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, s3test.StartVersity(t), 1)
			siglog := filepath.Join(c.dir, "signals")
			tk := c.start("holder", []string{"SIGLOG=" + siglog}, "run", "--", "sh", "-c", trapScript)
			id, _, _ := tk.identity(t, 20*time.Second)
			childPID(t, tk)
			if err := tk.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if code := tk.wait(t, 15*time.Second); code != 0 {
				t.Fatalf("exit %d after SIG%s, want 0; the command saw %v", code, name, signalsSeen(siglog))
			}
			if got := signalsSeen(siglog); len(got) != 1 || got[0] != name {
				t.Errorf("the command saw %v, want [%s]", got, name)
			}
			if !c.released(t, id) {
				t.Error("lease not released")
			}
		})
	}
}

// A closed stderr (the log reader gone) must not kill nodeid-init by
// SIGPIPE at its next log line: the stop sequence still runs and releases.
// Before, the line about forwarding SIGTERM killed it: no release.
func TestClosedStderrDoesNotKillTheSupervisor(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 1)
	siglog := filepath.Join(c.dir, "signals")
	report := filepath.Join(c.dir, "report")
	// The command's own output goes elsewhere: a shell that prints
	// "Terminated" to a closed stderr dies of SIGPIPE itself.
	cmd, exited, r := c.startUnread("holder", []string{"SIGLOG=" + siglog, "REPORT=" + report}, "run", "--", "sh", "-c", "exec >/dev/null 2>&1\n"+trapScript)
	waitFor(t, 20*time.Second, "the command's report", func() bool {
		b, err := os.ReadFile(report)
		return err == nil && strings.HasSuffix(string(b), "\n")
	})
	r.Close()
	// The pipe may hold unread lines: the next write is the first to fail.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-exited:
		if code != 0 {
			t.Fatalf("exit %d after SIGTERM with stderr closed, want 0 (died of SIGPIPE: -1); the command saw %v", code, signalsSeen(siglog))
		}
	case <-time.After(15 * time.Second):
		t.Fatal("nodeid-init still running 15s after SIGTERM")
	}
	if !c.released(t, 0) {
		t.Error("lease not released")
	}
}

// A waiting spare (no command yet) is not killed by the signals that are
// forwarded once the command runs: they are dropped until then.
func TestPassSignalsDoNotKillAWaitingSpare(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 1)
	holder := c.runTask("holder")
	holder.identity(t, 20*time.Second)
	spare := c.runTask("spare")
	waitFor(t, 10*time.Second, "the spare to wait", func() bool { return strings.Contains(spare.out.String(), "waiting") })
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH} {
		if err := spare.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		if !spare.running() {
			t.Fatalf("the waiting spare died of %v (exit %d)", sig, spare.code)
		}
	}
	_ = spare.cmd.Process.Signal(syscall.SIGTERM)
	if code := spare.wait(t, 15*time.Second); code != 0 {
		t.Fatalf("spare exit %d after SIGTERM, want 0", code)
	}
	if !holder.running() {
		t.Fatal("the holder stopped")
	}
}
