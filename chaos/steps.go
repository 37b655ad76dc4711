package chaos

// The steps the experiments share: start a cluster, pick the victim, expect
// its loss and a correctly prepared replacement.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/nodeid/nodeid/chaos/checker"
	"github.com/nodeid/nodeid/clock"
	"github.com/nodeid/nodeid/datadir"
	"github.com/nodeid/nodeid/internal/poll"
)

func mono() time.Duration { return clock.SystemBoottime() }

func since(t0 time.Duration, ns int64) time.Duration { return time.Duration(ns) - t0 }

// setup starts size+spares tasks and waits until size of them hold an ID.
func setup(ctx context.Context, c *Cluster, spares int, env ...string) (map[int]*Task, error) {
	if _, err := c.StartN("task", c.Size+spares, env...); err != nil {
		return nil, err
	}
	holders, err := c.WaitHolders(ctx, c.Size, 30*time.Second)
	if err != nil {
		return nil, err
	}
	// Let the spares list at least once, so they are really waiting.
	time.Sleep(2 * c.Timing.Poll)
	return holders, nil
}

// victim returns the holder of node and its version.
func victim(holders map[int]*Task, node int) (*Task, int64, error) {
	t := holders[node]
	if t == nil {
		return nil, 0, fmt.Errorf("nobody holds node %d", node)
	}
	id, _ := t.Identity()
	return t, id.Version, nil
}

// setupVictim starts the cluster with one spare and returns the holder of
// node and its version: the start of every single-fault experiment.
func setupVictim(ctx context.Context, c *Cluster, node int) (*Task, int64, error) {
	holders, err := setup(ctx, c, 1)
	if err != nil {
		return nil, 0, err
	}
	return victim(holders, node)
}

// renewedVictim is setupVictim, then waits for the victim's next renewal
// (Task.AfterRenewal): a fault injected at the returned t0 hits the holder
// at the worst moment of its renewal cycle.
func renewedVictim(ctx context.Context, c *Cluster, node int) (old *Task, v int64, t0 time.Duration, err error) {
	old, v, err = setupVictim(ctx, c, node)
	if err != nil {
		return nil, 0, 0, err
	}
	if err := old.AfterRenewal(ctx, 2*c.Timing.Lease); err != nil {
		return nil, 0, 0, err
	}
	return old, v, mono(), nil
}

// expectLoss waits for the supervisor to exit with code 3 and its broker to
// be gone, and returns when it exited.
func expectLoss(ctx context.Context, t *Task, timeout time.Duration) (time.Duration, error) {
	code, ok := t.Wait(timeout)
	if !ok {
		return 0, fmt.Errorf("%s still running %v after the fault", t.Name, timeout)
	}
	if code != 3 {
		return 0, fmt.Errorf("%s exited %d, want 3 (lease lost)", t.Name, code)
	}
	// "command killed: lease lost" is logged only when the supervisor's
	// loss handler wins the race with a broker that stopped by itself.
	if !t.LogHas("lease lost") {
		return 0, fmt.Errorf("%s exited 3 without logging \"lease lost\"", t.Name)
	}
	_, at, _ := t.Exit()
	id, _ := t.Identity()
	if err := poll.Until(ctx, 2*time.Second, pollEvery, "the broker of "+t.Name+" to die", func() bool { return !alive(id.PID) }); err != nil {
		return 0, err
	}
	return at, nil
}

func alive(pid int) bool {
	return pid > 0 && !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// expectReplacement waits until a task other than old writes as node with a
// version above v, and checks it is exactly v+1 and how it was prepared.
func expectReplacement(ctx context.Context, c *Cluster, r *Result, old *Task, node int, v int64, t0 time.Duration, graceful bool, timeout time.Duration) (*Task, error) {
	var first checker.Event
	var who *Task
	err := poll.Until(ctx, timeout, pollEvery, fmt.Sprintf("a replacement for node %d", node), func() bool {
		var ok bool
		first, who, ok = c.FirstWrite(node, v)
		return ok
	})
	if err != nil {
		return nil, err
	}
	r.Replace = since(t0, first.Mono)
	if who == old {
		return nil, fmt.Errorf("the old holder %s came back as node %d v%d", old.Name, node, first.Version)
	}
	id, _ := who.Identity()
	if id.Version != v+1 {
		return nil, fmt.Errorf("replacement %s has node %d v%d, want v%d", who.Name, node, id.Version, v+1)
	}
	if id.Graceful != graceful {
		return nil, fmt.Errorf("replacement %s: NODE_PREVIOUS_GRACEFUL=%v, want %v", who.Name, id.Graceful, graceful)
	}
	return who, checkPrepared(c, node, v, graceful)
}

// checkPrepared verifies that node-N/v(K+1) was initialised from vK: its
// marker names vK, and vK's data file is there, hard-linked after a graceful
// handover and copied (a prefix of vK's, which the zombie may have extended)
// otherwise.
func checkPrepared(c *Cluster, node int, k int64, graceful bool) error {
	oldDir := filepath.Join(c.Root, fmt.Sprintf("node-%d", node), "v"+strconv.FormatInt(k, 10))
	newDir := filepath.Join(c.Root, fmt.Sprintf("node-%d", node), "v"+strconv.FormatInt(k+1, 10))
	b, err := os.ReadFile(filepath.Join(newDir, datadir.MarkerName))
	if err != nil {
		return fmt.Errorf("marker of v%d: %w", k+1, err)
	}
	var m datadir.Marker
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("marker of v%d: %w", k+1, err)
	}
	if m.InitializedFrom == nil || int64(*m.InitializedFrom) != k {
		return fmt.Errorf("node-%d/v%d initialised from %v, want v%d", node, k+1, m.InitializedFrom, k)
	}
	name := checker.RecordFile(k)
	oldFi, err1 := os.Stat(filepath.Join(oldDir, name))
	newFi, err2 := os.Stat(filepath.Join(newDir, name))
	if err1 != nil || err2 != nil {
		return fmt.Errorf("v%d's data file in v%d and v%d: %v, %v", k, k, k+1, err1, err2)
	}
	if os.SameFile(oldFi, newFi) != graceful {
		return fmt.Errorf("node-%d/v%d/%s hard-linked=%v, want %v", node, k+1, name, !graceful, graceful)
	}
	if graceful {
		return nil
	}
	data, err := checker.ReadData(c.Root)
	if err != nil {
		return err
	}
	od, _ := data.Dir(node, k)
	nd, _ := data.Dir(node, k+1)
	oldRecs, newRecs := od.Files[k], nd.Files[k]
	if len(newRecs) == 0 || len(newRecs) > len(oldRecs) || !slices.Equal(newRecs, oldRecs[:len(newRecs)]) {
		return fmt.Errorf("node-%d/v%d/%s (%d records) is not a copy of a prefix of v%d's (%d records)", node, k+1, name, len(newRecs), k, len(oldRecs))
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
