package chaos

// Experiment 10: the supervisor's stderr blocks (issue 23.1).

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/nodeid/nodeid/internal/poll"
	"golang.org/x/sys/unix"
)

// runLogDriverBlocks starts node 0's holder with stdout and stderr on a
// pipe that nobody reads, fills the pipe so that every further write
// blocks, then overwrites the lease. The kill must not wait for the log.
func runLogDriverBlocks(ctx context.Context, c *Cluster, r *Result) error {
	const node = 0
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC); err != nil {
		return err
	}
	rd, wr := os.NewFile(uintptr(fds[0]), "stderr-r"), os.NewFile(uintptr(fds[1]), "stderr-w")
	defer rd.Close() // the supervisor's blocked writes then fail with EPIPE
	defer wr.Close()
	old, err := c.start("task-blocked", wr)
	if err != nil {
		return err
	}
	holders, err := c.WaitHolders(ctx, 1, 30*time.Second)
	if err != nil {
		return err
	}
	if holders[node] != old {
		return fmt.Errorf("node %d is not held by %s", node, old.Name)
	}
	if err := fillPipe(wr); err != nil {
		return err
	}
	if _, err := c.Start("task-spare"); err != nil {
		return err
	}
	time.Sleep(2 * c.Timing.Poll) // the spare waits
	id, _ := old.Identity()
	v := id.Version
	if err := old.AfterRenewal(ctx, 2*c.Timing.Lease); err != nil {
		return err
	}
	t0 := mono()
	body := fmt.Sprintf(`{"taskId":"abc","timestamp":%d,"nodeInstance":{"id":%d,"version":%d},"knownVersionMappings":{"mappingsByNodeId":{}}}`,
		time.Now().UnixMilli(), node, v)
	if err := c.PutObject(ctx, c.LeaseKey(node), body, map[string]string{"version": strconv.FormatInt(v, 10), "acquirable": "true", "taskid": "abc"}); err != nil {
		return err
	}
	bound := c.Timing.Renew + time.Second
	if err := poll.Until(ctx, bound, time.Millisecond, "the broker of "+old.Name+" to die with stderr blocked", func() bool { return !alive(id.PID) }); err != nil {
		return fmt.Errorf("%w (bound R + 1 s = %v)", err, bound)
	}
	r.Detect = mono() - t0
	code, ok := old.Wait(3 * c.Timing.Lease)
	if !ok {
		return fmt.Errorf("%s still running %v after the overwrite, with its broker dead", old.Name, 3*c.Timing.Lease)
	}
	if code != 3 {
		return fmt.Errorf("%s exited %d, want 3 (lease lost)", old.Name, code)
	}
	if _, err := expectReplacement(ctx, c, r, old, node, v, t0, false, 8*c.Timing.Lease); err != nil {
		return err
	}
	r.notef("broker dead %v after the overwrite (bound R + 1 s = %v) with stderr blocked; node %d v%d -> v%d, copied",
		r.Detect.Round(time.Millisecond), bound, node, v, v+1)
	return sleep(ctx, c.Timing.Lease/2)
}

// fillPipe writes to the pipe w until it takes no byte more. Opening
// /proc/self/fd/N of a pipe gives a new open file description, so
// O_NONBLOCK there leaves the supervisor's description blocking.
func fillPipe(w *os.File) error {
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", w.Fd()), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the pipe non-blocking: %w", err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 4096)
	for range 1 << 12 {
		_, err := unix.Write(fd, buf)
		switch {
		case err == unix.EAGAIN && len(buf) == 1:
			return nil
		case err == unix.EAGAIN:
			buf = buf[:1] // a page partly filled may still take small writes
		case err != nil:
			return fmt.Errorf("fill the pipe: %w", err)
		}
	}
	return fmt.Errorf("the pipe took %d writes and is not full", 1<<12)
}
