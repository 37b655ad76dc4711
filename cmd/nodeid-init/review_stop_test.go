package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
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
