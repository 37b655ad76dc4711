package main_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
)

// The final error line is written after cmdRun returned and stopped its
// signal handling: with the log reader gone, SIGPIPE must not kill
// nodeid-init and lose the documented exit code (here 5, acquire timeout).
// Found by a review: SIGPIPE was notified only while cmdRun ran.
func TestFinalErrorLineOnAClosedStderrKeepsTheExitCode(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 1)
	c.runTask("holder").identity(t, 20*time.Second)
	cmd, exited, r := c.startUnread("late", []string{"NODEID_ACQUIRE_TIMEOUT=2s"}, "run", "--", "true")
	time.Sleep(700 * time.Millisecond) // past signal.Notify, waiting for an ID
	r.Close()
	select {
	case code := <-exited:
		if code != 5 {
			ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
			t.Fatalf("(signaled=%t %v): exit %d with stderr closed, want 5 (acquire timeout); -1 = died of a signal (SIGPIPE)", ws.Signaled(), ws.Signal(), code)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("still running")
	}
}
