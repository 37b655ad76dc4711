package chaos

// Experiment 11: the data root stops answering (an EFS or NFS server gone).

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nodeid/nodeid/datadir"
	"github.com/nodeid/nodeid/internal/efsfs"
	"github.com/nodeid/nodeid/internal/poll"
)

const (
	exitFSHung  = 7 // nodeid-init's exit code for a hung data root (docs/cli.md)
	fsTimeout   = 2 * time.Second
	stopTimeout = time.Second
	// hangExit bounds the exit after the bound fired (nodeid-init's
	// hangExitGrace), plus scheduling slack on a loaded machine.
	hangExit = 3*time.Second + 2*time.Second
)

// runFSHang serves the data root through an efsfs FUSE mount, then makes it
// hang and SIGTERMs node 0's holder: its stop sequence's syncfs never
// returns. The spare takes the ID after the expiry and its preparation
// hangs too. Both must exit 7 within the bound without releasing; once the
// file system answers again a new task takes the ID and starts.
func runFSHang(ctx context.Context, c *Cluster, r *Result) error {
	const node = 0
	if err := efsfs.Available(); err != nil {
		return fmt.Errorf("file-system hang needs a FUSE mount: %w", err)
	}
	mnt := filepath.Join(c.dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return err
	}
	f, err := efsfs.Mount(c.Root, mnt, efsfs.EFS)
	if err != nil {
		return err
	}
	defer func() {
		// Nothing may use the mount when it goes: kill what still runs.
		for _, t := range c.Tasks() {
			if t.Running() {
				_ = t.SignalAll(syscall.SIGKILL)
				t.Wait(10 * time.Second)
			}
		}
		if err := f.Unmount(); err != nil {
			c.logf("unmount %s: %v", mnt, err)
		}
	}()
	env := []string{"NODEID_DATA_ROOT=" + mnt, "NODEID_FS_TIMEOUT=" + fsTimeout.String(), "NODEID_STOP_TIMEOUT=" + stopTimeout.String()}
	holders, err := setup(ctx, c, 1, env...)
	if err != nil {
		return err
	}
	old, v, err := victim(holders, node)
	if err != nil {
		return err
	}
	var spare *Task
	for _, t := range c.Tasks() {
		if t != old {
			spare = t
		}
	}

	// 1. The stop sequence: SIGTERM with the data root hung.
	f.HangAll()
	t0 := mono()
	if err := old.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	bound := stopTimeout + fsTimeout + hangExit
	if err := expectHangExit(old, bound); err != nil {
		return err
	}
	_, at, _ := old.Exit()
	r.Detect = at - t0
	l, err := c.Lease(ctx, node)
	if err != nil {
		return err
	}
	if !l.Held() || l.TaskID != old.Name && int64(l.Instance.Version) <= v {
		return fmt.Errorf("after %s exited the lease is %+v: released, want left to expire", old.Name, l)
	}
	r.notef("stop sequence hung: %s exited 7 after %v, lease left to expire", old.Name, r.Detect.Round(10*time.Millisecond))

	// 2. A preparation: the spare takes the expired lease, then hangs.
	if err := poll.Until(ctx, 4*c.Timing.Lease, pollEvery, spare.Name+" to take node 0", func() bool {
		return spare.LogHas("acquired node id")
	}); err != nil {
		return err
	}
	took := mono()
	if err := expectHangExit(spare, fsTimeout+time.Second+hangExit); err != nil {
		return err
	}
	_, sat, _ := spare.Exit()
	if l, err := c.Lease(ctx, node); err != nil || !l.Held() || l.TaskID != spare.Name || int64(l.Instance.Version) != v+1 {
		return fmt.Errorf("after %s's preparation hung the lease is %+v (%v), want held by it at v%d, left to expire", spare.Name, l, err, v+1)
	}
	r.notef("preparation hung: %s exited 7 %v after it took v%d", spare.Name, (sat - took).Round(10*time.Millisecond), v+1)

	// 3. The file system answers again: a new task takes the ID.
	f.Release()
	next, err := c.Start("successor", env...)
	if err != nil {
		return err
	}
	if err := poll.Until(ctx, 6*c.Timing.Lease+10*time.Second, pollEvery, "the successor to write as node 0", func() bool {
		_, who, ok := c.FirstWrite(node, v+1)
		return ok && who == next
	}); err != nil {
		return err
	}
	first, _, _ := c.FirstWrite(node, v+1)
	r.Replace = since(t0, first.Mono)
	id, _ := next.Identity()
	if id.Version != v+2 || id.Graceful {
		return fmt.Errorf("successor has node %d v%d graceful=%v, want v%d after an expiry", id.Node, id.Version, id.Graceful, v+2)
	}
	if err := checkInitializedFrom(c, node, v+2, v); err != nil {
		return err
	}
	r.notef("successor took node %d v%d from v%d", node, v+2, v)
	if err := sleep(ctx, c.Timing.Lease/2); err != nil {
		return err
	}
	if err := next.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	if code, ok := next.Wait(10 * time.Second); !ok || code != 0 {
		return fmt.Errorf("successor did not stop cleanly on SIGTERM: exit %d (exited: %v)", code, ok)
	}
	return nil
}

// expectHangExit waits for t to exit 7 with the "file system hung" line.
func expectHangExit(t *Task, bound time.Duration) error {
	code, ok := t.Wait(bound)
	if !ok {
		return fmt.Errorf("%s still running %v after the data root hung (bound: fs-timeout %v)", t.Name, bound, fsTimeout)
	}
	if code != exitFSHung {
		return fmt.Errorf("%s exited %d, want %d (file system hung)", t.Name, code, exitFSHung)
	}
	if !strings.Contains(t.Log(), "file system hung") {
		return fmt.Errorf("%s exited 7 without logging \"file system hung\"", t.Name)
	}
	return nil
}

// checkInitializedFrom verifies node-N/vK's marker names vFrom.
func checkInitializedFrom(c *Cluster, node int, k, from int64) error {
	b, err := os.ReadFile(filepath.Join(c.Root, fmt.Sprintf("node-%d", node), fmt.Sprintf("v%d", k), datadir.MarkerName))
	if err != nil {
		return fmt.Errorf("marker of v%d: %w", k, err)
	}
	var m datadir.Marker
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("marker of v%d: %w", k, err)
	}
	if m.InitializedFrom == nil || int64(*m.InitializedFrom) != from {
		return fmt.Errorf("node-%d/v%d initialised from %v, want v%d", node, k, m.InitializedFrom, from)
	}
	return nil
}
