package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// Adversarial review (wt-review-data) of run's stop sequence.

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

// On a loss, run SIGKILLs the process group -pid and then blocks on
// <-exited (the leader's Wait) before stopRest kills the rest. A leader
// that moved itself into another process group of the session (setpgid is
// allowed for a group leader that is not a session leader) is not in
// group -pid: the SIGKILL hits nobody, <-exited never returns, stopRest
// never runs, and the broker keeps writing its data directory while the
// lease is lost and a successor holds the node.
func TestReviewLeaderThatChangedGroupSurvivesLeaseLoss(t *testing.T) {
	c := newCluster(t, s3test.NewFake(t), 1)
	script := `
my $c = fork();
if ($c == 0) { setpgrp(0, 0); sleep 1000; exit 0; }
open(P, ">", "$ENV{DIR}/grp.pid"); print P "$c\n"; close P;
select(undef, undef, undef, 0.3);
setpgrp(0, $c) or die "setpgrp: $!";
open(P, ">", "$ENV{DIR}/leader.pid"); print P "$$\n"; close P;
open(R, ">", $ENV{REPORT}); print R "$ENV{NODE_ID} $ENV{NODE_VERSION} $ENV{NODE_PREVIOUS_GRACEFUL}\n"; close R;
while (1) { open(F, ">>", "$ENV{NODE_DATA_DIR}/leader.log"); print F "x\n"; close F; select(undef, undef, undef, 0.02); }
`
	tk := c.start("holder", []string{"DIR=" + c.dir}, "run", "--", "perl", "-e", script)
	id, v, _ := tk.identity(t, 20*time.Second)
	leader := helperPID(t, c, "leader")
	helperPID(t, c, "grp") // killed at cleanup
	body := fmt.Sprintf(`{"taskId":"intruder","timestamp":%d,"nodeInstance":{"id":%d,"version":%d},"knownVersionMappings":{"mappingsByNodeId":{}}}`,
		time.Now().Add(time.Hour).UnixMilli(), id, v)
	putObject(t, c.srv, "e2e/"+nodeid.LeaseKey("", id), body, map[string]string{"taskid": "intruder", "version": fmt.Sprint(v), "acquirable": "true"})

	// The intruder's lease expires after L+1s; a successor then holds v+1.
	waiter := c.runTask("waiter")
	_, wv, _ := waiter.identity(t, 20*time.Second)
	log := filepath.Join(c.root, "node-0", fmt.Sprintf("v%d", v), "leader.log")
	if processAlive(leader) && grows(log, 500*time.Millisecond) {
		t.Errorf("successor holds node 0 v%d, yet the lost holder's command (pid %d) still appends to %s; nodeid-init running: %v",
			wv, leader, log, tk.running())
	}
	if tk.running() {
		t.Errorf("nodeid-init still running after its lease was lost and a successor took over (want exit 3 at once)")
	}
	_ = syscall.Kill(leader, syscall.SIGKILL)
}

// PDEATHSIG reaches only the leader. If nodeid-init itself is SIGKILLed
// (OOM killer, kill -9) and is not the PID 1 of a PID namespace, the rest
// of the command's process group lives on: it keeps writing the data
// directory after the lease has expired and a successor holds the node.
// docs/cli.md: "Starts CMD ... with PDEATHSIG=SIGKILL (it dies if
// nodeid-init dies, even by SIGKILL)"; invariant 4: a lost lease stops the
// supervised process group before any successor can be valid.
func TestReviewKill9OfSupervisorLeavesTheGroupWritingUnderASuccessor(t *testing.T) {
	c := newCluster(t, s3test.NewFake(t), 1)
	script := helper("bg", false, false) + report + `while :; do sleep 0.02; done`
	holder := c.start("holder", []string{"DIR=" + c.dir}, "run", "--", "sh", "-c", script)
	_, v, _ := holder.identity(t, 20*time.Second)
	bg := helperPID(t, c, "bg")
	if err := holder.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	holder.wait(t, 5*time.Second)

	waiter := c.runTask("waiter")
	_, wv, _ := waiter.identity(t, 20*time.Second)
	log := filepath.Join(c.root, "node-0", fmt.Sprintf("v%d", v), "bg.log")
	if processAlive(bg) && grows(log, 500*time.Millisecond) {
		t.Errorf("successor holds node 0 v%d; a process of the killed holder's group (pid %d, same pgid as the command) still appends to %s",
			wv, bg, log)
	}
}
