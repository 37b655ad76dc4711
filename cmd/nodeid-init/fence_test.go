package main_test

// Issue 23.1: the kill on a loss waits on nothing, not even stderr.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// procGone reports whether pid is dead: gone, or a zombie (it holds no
// files and writes nothing).
func procGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] == 'Z' || b[i+2] == 'X'
	}
	return false
}

// startUnread runs nodeid-init with stdout and stderr on a pipe that
// nobody reads, as a log driver in blocking mode that cannot ship.
// It returns the process, its exit code's channel and the pipe's read end.
func (c *cluster) startUnread(name string, env []string, args ...string) (*exec.Cmd, chan int, *os.File) {
	c.t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(binary, args...)
	cmd.Env = append(append(append([]string{}, c.env...), "NODEID_TASK_ID="+name), env...)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	w.Close()
	exited := make(chan int, 1)
	go func() {
		err := cmd.Wait()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		exited <- code
	}()
	c.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		r.Close()
	})
	return cmd, exited, r
}

// A child that starts a grandchild and then fills the shared stderr, which
// nobody reads; the lease is then overwritten from outside. Child and
// grandchild must be dead within R + 1 s. Before the fix the "lease lost"
// line blocked on stderr ahead of the kill, and both lived on.
func TestLossKillsTheTreeWhileStderrIsNotRead(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 1)
	pids := filepath.Join(c.dir, "pids")
	script := `sleep 300 & echo "$$ $! $NODE_ID $NODE_VERSION" > "$PIDS.tmp"; mv "$PIDS.tmp" "$PIDS"; exec yes "the broker floods stderr" >&2`
	_, exited, _ := c.startUnread("holder", []string{"PIDS=" + pids}, "run", "--", "sh", "-c", script)

	var child, grandchild, id, version int
	waitFor(t, 20*time.Second, "the child's pids", func() bool {
		b, err := os.ReadFile(pids)
		return err == nil && func() bool {
			_, err := fmt.Sscanf(string(b), "%d %d %d %d", &child, &grandchild, &id, &version)
			return err == nil
		}()
	})
	time.Sleep(300 * time.Millisecond) // the pipe is full by now
	if procGone(child) || procGone(grandchild) {
		t.Fatalf("child %d or grandchild %d dead before the fault", child, grandchild)
	}
	body := fmt.Sprintf(`{"taskId":"intruder","timestamp":%d,"nodeInstance":{"id":%d,"version":%d},"knownVersionMappings":{"mappingsByNodeId":{}}}`,
		time.Now().UnixMilli(), id, version)
	putObject(t, c.srv, "e2e/"+nodeid.LeaseKey("", id), body, map[string]string{"taskid": "intruder", "version": fmt.Sprint(version), "acquirable": "true"})
	overwritten := time.Now()

	const bound = 500*time.Millisecond + time.Second // R + 1 s
	for !(procGone(child) && procGone(grandchild)) {
		if time.Since(overwritten) > bound {
			t.Fatalf("child %d (gone: %t) and grandchild %d (gone: %t) not both dead %v after the overwrite, with stderr not read",
				child, procGone(child), grandchild, procGone(grandchild), bound)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("tree dead %v after the overwrite", time.Since(overwritten).Round(time.Millisecond))
	// And nodeid-init itself does not hang on its stderr: exit 3.
	select {
	case code := <-exited:
		if code != 3 {
			t.Errorf("exit code %d, want 3", code)
		}
	case <-time.After(10 * time.Second):
		t.Error("nodeid-init still running 10s after the loss, with stderr not read")
	}
}
