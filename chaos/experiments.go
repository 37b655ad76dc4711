package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nodeid/nodeid/chaos/checker"
	"github.com/nodeid/nodeid/clock"
	"github.com/nodeid/nodeid/datadir"
	"github.com/nodeid/nodeid/internal/faultproxy"
)

var registry = []*Experiment{
	{
		Number: 1, Name: "lease-overwrite", Short: true, Size: 3, Timing: ShortTiming, Timeout: 60 * time.Second,
		Does: "Overwrites node 2's lease object from outside with another task ID (abc), a fresh timestamp and the version " +
			"the holder has, as a buggy tool or a second cluster would.",
		Expects: "The holder's next renewal gets 412: its broker is killed and it exits 3. The spare acquires node 2 with " +
			"version K+1 once the foreign lease expires and prepares node-2/v(K+1) by copying vK (not hard-linking: the takeover is not graceful).",
		run: runLeaseOverwrite,
	},
	{
		Number: 2, Name: "lease-delete", Size: 3, Timing: ShortTiming, Timeout: 60 * time.Second,
		Does:    "Deletes node 1's lease object.",
		Expects: "The holder's next renewal gets 404: it exits 3. The object is recreated with the highest known version and the spare takes node 1 with a higher version than before.",
		run:     runLeaseDelete,
	},
	{
		Number: 3, Name: "kill-9", Short: true, Size: 3, Timing: ShortTiming, Timeout: 60 * time.Second,
		Does:    "SIGKILLs the supervisor holding node 1; its broker dies with it (Pdeathsig).",
		Expects: "The spare takes node 1 with version K+1 after the lease expires (about L+1 s by the server's clock), copying vK.",
		run:     runKill9,
	},
	{
		Number: 4, Name: "pause", Short: true, Size: 3, Timing: ShortTiming, Timeout: 60 * time.Second,
		Does:    "SIGSTOPs the supervisor and the broker holding node 0 for 2.5 L, then SIGCONTs them.",
		Expects: "The spare takes node 0 while they are stopped. Once resumed, the old broker writes nothing: its lease file's deadline has passed; the supervisor exits 3.",
		run:     runPause,
	},
	{
		Number: 5, Name: "blackhole", Size: 3, Timing: ShortTiming, Timeout: 60 * time.Second,
		Does:    "Blackholes S3 for the task holding node 1 (its proxy holds every request) for 3 L, then heals.",
		Expects: "The holder fences itself at its deadline s+L-m (at most L-m after the fault) and exits 3; the spare takes node 1 with version K+1.",
		run:     runBlackhole,
	},
	{
		Number: 6, Name: "latency-503", Size: 3, Timing: ShortTiming, Timeout: 60 * time.Second,
		Does:    "For 5 L, every task's requests are delayed 20-120 ms and one in ten answered 503 SlowDown: below the renewal budget (T = R/2 = 250 ms, deadline L-m).",
		Expects: "No holder loses its lease, no task takes over, no version changes.",
		run:     runLatency503,
	},
	{
		Number: 7, Name: "rolling-deploy", Size: 3, Timing: ShortTiming, Timeout: 90 * time.Second,
		Does:    "Starts N new tasks beside the N old holders, then SIGTERMs the old ones one by one, as an ECS deployment does.",
		Expects: "Each old task drains (broker stops, lease released, exit 0); a new task takes each ID at once with version K+1, NODE_PREVIOUS_GRACEFUL=true, and vK's files hard-linked into v(K+1) with no record lost.",
		run:     runRollingDeploy,
	},
	{
		Number: 8, Name: "start-storm", Size: 50, Timeout: 150 * time.Second,
		Timing:  Timing{Lease: 4 * time.Second, Renew: time.Second, Poll: 500 * time.Millisecond},
		Does:    "Starts 50 tasks for 50 node IDs at the same moment on an empty bucket (lease 4 s, so 100 processes on a small machine do not starve renewals).",
		Expects: "Every task gets a distinct ID with version 1, nobody loses a lease.",
		run:     runStartStorm,
	},
	{
		Number: 8, Name: "start-storm-skip-probe", Size: 50, Timeout: 150 * time.Second,
		Timing:  Timing{Lease: 4 * time.Second, Renew: time.Second, Poll: 500 * time.Millisecond},
		Does:    "The start storm again with NODEID_SKIP_PROBE=true, to measure the acquisition storm itself apart from the start-up probe.",
		Expects: "Every task gets a distinct ID with version 1, nobody loses a lease.",
		run:     runStartStormSkipProbe,
	},
	{
		Number: 9, Name: "clock-skew", Size: 3, Timing: ShortTiming, Timeout: 60 * time.Second,
		Does: "Holders with wall clocks offset -1 h, 0 and +1 h and a spare at +1 h (NODEID_TEST_CLOCK_OFFSET) run for 4 L; " +
			"then the -1 h holder, whose lease timestamps look an hour old to the spare, is killed.",
		Expects: "No takeover while the holders live (no decision reads a wall clock); after the kill the spare takes that ID with version K+1 as after any crash.",
		run:     runClockSkew,
	},
}

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
	if err := waitFor(ctx, 2*time.Second, "the broker of "+t.Name+" to die", func() bool { return !alive(id.PID) }); err != nil {
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
	err := waitFor(ctx, timeout, fmt.Sprintf("a replacement for node %d", node), func() bool {
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

func runLeaseOverwrite(ctx context.Context, c *Cluster, r *Result) error {
	const node = 2
	old, v, err := setupVictim(ctx, c, node)
	if err != nil {
		return err
	}
	l, err := c.Lease(ctx, node)
	if err != nil {
		return err
	}
	if l.TaskID != old.Name || int64(l.Instance.Version) != v {
		return fmt.Errorf("lease of node %d says %s v%d, broker says %s v%d", node, l.TaskID, l.Instance.Version, old.Name, v)
	}
	body := fmt.Sprintf(`{"taskId":"abc","timestamp":%d,"nodeInstance":{"id":%d,"version":%d},"knownVersionMappings":{"mappingsByNodeId":{}}}`,
		time.Now().UnixMilli(), node, v)
	return breakLease(ctx, c, r, old, node, v, "copied", func() error {
		return c.PutObject(ctx, c.LeaseKey(node), body, map[string]string{"version": strconv.FormatInt(v, 10), "acquirable": "true", "taskid": "abc"})
	})
}

// breakLease runs fault on node's lease object right after its holder old
// renewed, then expects old to lose the lease (r.Detect) and a replacement
// to take the node with version v+1, copying the data.
func breakLease(ctx context.Context, c *Cluster, r *Result, old *Task, node int, v int64, note string, fault func() error) error {
	if err := old.AfterRenewal(ctx, 2*c.Timing.Lease); err != nil {
		return err
	}
	t0 := mono()
	if err := fault(); err != nil {
		return err
	}
	at, err := expectLoss(ctx, old, 3*c.Timing.Lease)
	if err != nil {
		return err
	}
	r.Detect = at - t0
	if _, err := expectReplacement(ctx, c, r, old, node, v, t0, false, 8*c.Timing.Lease); err != nil {
		return err
	}
	r.notef("node %d v%d -> v%d, %s", node, v, v+1, note)
	return sleep(ctx, c.Timing.Lease/2)
}

func runLeaseDelete(ctx context.Context, c *Cluster, r *Result) error {
	const node = 1
	old, v, err := setupVictim(ctx, c, node)
	if err != nil {
		return err
	}
	// Peers learn each other's versions by re-reading the leases every
	// MappingsRefreshInterval (L). Only then can the deleted object be
	// recreated with its version; see docs/chaos.md for an earlier delete.
	if err := sleep(ctx, 2*c.Timing.Lease); err != nil {
		return err
	}
	return breakLease(ctx, c, r, old, node, v, "after the object was recreated", func() error {
		return c.DeleteObject(ctx, c.LeaseKey(node))
	})
}

func runKill9(ctx context.Context, c *Cluster, r *Result) error {
	const node = 1
	old, v, err := setupVictim(ctx, c, node)
	if err != nil {
		return err
	}
	id, _ := old.Identity()
	if err := old.AfterRenewal(ctx, 2*c.Timing.Lease); err != nil {
		return err
	}
	t0 := mono()
	if err := old.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	if _, ok := old.Wait(5 * time.Second); !ok {
		return fmt.Errorf("%s survived SIGKILL", old.Name)
	}
	if err := waitFor(ctx, 2*time.Second, "the orphaned broker to die (Pdeathsig)", func() bool { return !alive(id.PID) }); err != nil {
		return err
	}
	r.Detect = 0
	if _, err := expectReplacement(ctx, c, r, old, node, v, t0, false, 8*c.Timing.Lease); err != nil {
		return err
	}
	r.notef("node %d v%d -> v%d, copied", node, v, v+1)
	return sleep(ctx, c.Timing.Lease/2)
}

func runPause(ctx context.Context, c *Cluster, r *Result) error {
	const node = 0
	old, v, err := setupVictim(ctx, c, node)
	if err != nil {
		return err
	}
	if err := old.AfterRenewal(ctx, 2*c.Timing.Lease); err != nil {
		return err
	}
	t0 := mono()
	if err := old.SignalAll(syscall.SIGSTOP); err != nil {
		return err
	}
	// Long enough for a replacement (L + 1 s by S3's clock, a poll, the
	// takeover and the first write) on a loaded machine; 2.5 L was not.
	pause := c.Timing.Lease * 4
	if _, err := expectReplacement(ctx, c, r, old, node, v, t0, false, pause); err != nil {
		old.SignalAll(syscall.SIGCONT)
		return fmt.Errorf("while %s was stopped: %w", old.Name, err)
	}
	if err := sleep(ctx, pause-(mono()-t0)); err != nil {
		return err
	}
	resumed := mono()
	if err := old.SignalAll(syscall.SIGCONT); err != nil {
		return err
	}
	at, err := expectLoss(ctx, old, 2*c.Timing.Lease)
	if err != nil {
		return err
	}
	r.Detect = at - resumed
	stoppedItself := false
	for _, e := range old.Events() {
		if e.Kind == checker.KindWrite && time.Duration(e.Mono) > resumed {
			return fmt.Errorf("%s wrote seq %d after it was resumed", old.Name, e.Seq)
		}
		if e.Kind == checker.KindStop && time.Duration(e.Mono) > resumed {
			stoppedItself = true
			r.notef("resumed broker stopped itself: %s", e.Reason)
		}
	}
	if !stoppedItself {
		r.notef("resumed broker was killed by its supervisor before its next write")
	}
	r.notef("no write after resume; node %d v%d -> v%d", node, v, v+1)
	return sleep(ctx, c.Timing.Lease/2)
}

func runBlackhole(ctx context.Context, c *Cluster, r *Result) error {
	const node = 1
	old, v, err := setupVictim(ctx, c, node)
	if err != nil {
		return err
	}
	if err := old.AfterRenewal(ctx, 2*c.Timing.Lease); err != nil {
		return err
	}
	t0 := mono()
	old.Proxy.Set(faultproxy.Fault{Blackhole: true})
	at, err := expectLoss(ctx, old, 2*c.Timing.Lease)
	if err != nil {
		return err
	}
	r.Detect = at - t0
	if budget := c.Timing.Lease - c.Timing.Margin() + c.Timing.Renew; r.Detect > budget {
		r.notef("detection %v exceeds L-m+R = %v", r.Detect.Round(time.Millisecond), budget)
	}
	if _, err := expectReplacement(ctx, c, r, old, node, v, t0, false, 8*c.Timing.Lease); err != nil {
		return err
	}
	if err := sleep(ctx, 3*c.Timing.Lease-(mono()-t0)); err != nil {
		return err
	}
	old.Proxy.Pass()
	r.notef("%d requests held by the blackhole", old.Proxy.Stats().Blackholed)
	return sleep(ctx, c.Timing.Lease/2)
}

func runLatency503(ctx context.Context, c *Cluster, r *Result) error {
	holders, err := setup(ctx, c, 1)
	if err != nil {
		return err
	}
	before := map[int]int64{}
	for n, t := range holders {
		id, _ := t.Identity()
		before[n] = id.Version
	}
	for i, t := range c.Tasks() {
		t.Proxy.Set(faultproxy.Fault{Latency: 20 * time.Millisecond, Jitter: 100 * time.Millisecond,
			Status: 503, Probability: 0.1, Seed: uint64(i + 1)})
	}
	if err := sleep(ctx, 5*c.Timing.Lease); err != nil {
		return err
	}
	injected, delayed := 0, 0
	for _, t := range c.Tasks() {
		st := t.Proxy.Stats()
		injected += st.Injected
		delayed += st.Delayed
		t.Proxy.Pass()
	}
	for n, t := range holders {
		if !t.Running() {
			code, _, _ := t.Exit()
			return fmt.Errorf("holder %s of node %d exited %d under latency and 503s", t.Name, n, code)
		}
	}
	now := c.Holders()
	for n, v := range before {
		id, _ := now[n].Identity()
		if now[n] != holders[n] || id.Version != v {
			return fmt.Errorf("node %d changed hands under latency and 503s: v%d -> %s v%d", n, v, now[n].Name, id.Version)
		}
	}
	r.notef("%d answers were 503, %d requests delayed; no lease lost", injected, delayed)
	return nil
}

func runRollingDeploy(ctx context.Context, c *Cluster, r *Result) error {
	if _, err := c.StartN("old", c.Size); err != nil {
		return err
	}
	holders, err := c.WaitHolders(ctx, c.Size, 30*time.Second)
	if err != nil {
		return err
	}
	if _, err := c.StartN("new", c.Size); err != nil {
		return err
	}
	if err := sleep(ctx, 2*c.Timing.Poll); err != nil {
		return err
	}
	var worst time.Duration
	for node := range c.Size {
		old, v, err := victim(holders, node)
		if err != nil {
			return err
		}
		t0 := mono()
		if err := old.Signal(syscall.SIGTERM); err != nil {
			return err
		}
		code, ok := old.Wait(10 * time.Second)
		if !ok || code != 0 {
			return fmt.Errorf("%s after SIGTERM: exited=%v code %d, want a clean exit 0", old.Name, ok, code)
		}
		if !old.LogHas("command exited, lease released") {
			return fmt.Errorf("%s did not release its lease", old.Name)
		}
		who, err := expectReplacement(ctx, c, r, old, node, v, t0, true, 5*time.Second)
		if err != nil {
			return err
		}
		if who.Name[:3] != "new" {
			return fmt.Errorf("node %d went to %s, not a new task", node, who.Name)
		}
		worst = max(worst, r.Replace)
		r.notef("node %d: %v", node, r.Replace.Round(10*time.Millisecond))
		if err := sleep(ctx, c.Timing.Renew); err != nil {
			return err
		}
	}
	r.Replace = worst
	return nil
}

func runStartStorm(ctx context.Context, c *Cluster, r *Result) error {
	return startStorm(ctx, c, r)
}

func runStartStormSkipProbe(ctx context.Context, c *Cluster, r *Result) error {
	return startStorm(ctx, c, r, "NODEID_SKIP_PROBE=true")
}

// startStorm starts Size tasks at once and waits until all hold, failing
// early when a task exits.
func startStorm(ctx context.Context, c *Cluster, r *Result, env ...string) error {
	t0 := mono()
	if _, err := c.StartN("task", c.Size, append([]string{"CHAOS_WRITE_INTERVAL=250ms"}, env...)...); err != nil {
		return err
	}
	var exited []*Task
	err := waitFor(ctx, 60*time.Second, fmt.Sprintf("%d holders", c.Size), func() bool {
		exited = exited[:0]
		for _, t := range c.Tasks() {
			if !t.Running() {
				exited = append(exited, t)
			}
		}
		return len(exited) > 0 || len(c.Holders()) >= c.Size
	})
	if len(exited) > 0 {
		// Let the others finish starting, to report the whole damage.
		sleep(ctx, 3*time.Second)
		why := map[string]int{}
		n := 0
		for _, t := range c.Tasks() {
			if code, _, ok := t.Exit(); ok {
				n++
				why[fmt.Sprintf("exit %d: %s", code, lastLine(t.Log()))]++
			}
		}
		for w, k := range why {
			r.notef("%d× %s", k, w)
		}
		return fmt.Errorf("%d of %d tasks exited during the storm (%d held)", n, c.Size, len(c.Holders()))
	}
	if err != nil {
		return fmt.Errorf("%w (%d held)", err, len(c.Holders()))
	}
	r.Replace = mono() - t0
	holders := c.Holders()
	for n, t := range holders {
		id, _ := t.Identity()
		if id.Version != 1 {
			return fmt.Errorf("%s got node %d v%d on an empty bucket, want v1", t.Name, n, id.Version)
		}
	}
	if err := sleep(ctx, c.Timing.Lease); err != nil {
		return err
	}
	for _, t := range c.Tasks() {
		if !t.Running() {
			code, _, _ := t.Exit()
			return fmt.Errorf("%s exited %d during the storm", t.Name, code)
		}
	}
	r.notef("%d tasks hold %d distinct IDs, all v1", len(holders), len(holders))
	return nil
}

// lastLine returns the last line of a log, shortened.
func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}

func runClockSkew(ctx context.Context, c *Cluster, r *Result) error {
	offsets := []string{"-1h", "0s", "1h"}
	var started []*Task
	for i, off := range offsets {
		t, err := c.Start(fmt.Sprintf("skew%s", off), "NODEID_TEST_CLOCK_OFFSET="+off)
		if err != nil {
			return err
		}
		started = append(started, t)
		if _, err := c.WaitHolders(ctx, i+1, 30*time.Second); err != nil {
			return err
		}
	}
	spare, err := c.Start("spare+1h", "NODEID_TEST_CLOCK_OFFSET=1h")
	if err != nil {
		return err
	}
	holders := c.Holders()
	if err := sleep(ctx, 4*c.Timing.Lease); err != nil {
		return err
	}
	if _, ok := spare.Identity(); ok {
		id, _ := spare.Identity()
		return fmt.Errorf("the +1 h spare took node %d v%d while every holder was alive", id.Node, id.Version)
	}
	for _, t := range started {
		if !t.Running() {
			code, _, _ := t.Exit()
			return fmt.Errorf("skewed holder %s exited %d", t.Name, code)
		}
	}
	old := started[0] // the -1 h holder
	id, _ := old.Identity()
	if holders[id.Node] != old {
		return fmt.Errorf("holder map inconsistent for %s", old.Name)
	}
	if err := old.AfterRenewal(ctx, 2*c.Timing.Lease); err != nil {
		return err
	}
	t0 := mono()
	if err := old.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	if _, err := expectReplacement(ctx, c, r, old, id.Node, id.Version, t0, false, 8*c.Timing.Lease); err != nil {
		return err
	}
	r.notef("no takeover in %v with clocks at -1h/0/+1h; after the kill the +1h spare took node %d v%d", 4*c.Timing.Lease, id.Node, id.Version+1)
	return sleep(ctx, c.Timing.Lease/2)
}
