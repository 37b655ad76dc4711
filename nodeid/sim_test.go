package nodeid

import (
	"container/heap"
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nodeid/nodeid/clock"
)

// The deterministic simulation runs the real Provider code (acquire, renew,
// self-fence, release, reconcile) for several tasks against a simulated S3
// inside a testing/synctest bubble: time is fake and advances only when
// every goroutine waits, so a whole minute of cluster life takes
// milliseconds, and every choice — delays, drops, duplicated requests, lost
// answers, pauses, crashes, outside overwrites and deletes, scaling — comes
// from one seeded generator. A failing seed reproduces: run
// `go test ./nodeid -run TestSimulationSeed -sim.seed=N -v`.
//
// Invariants, checked after every event:
//  1. at any instant at most one task considers itself the valid holder of
//     a node ID (Provider.Valid, each on its own drifting clock);
//  2. a node's version never decreases, and each acquisition gets a version
//     above every earlier one (outside deletes excepted, see docs/simulation.md);
//  3. a task whose lease was lost never writes it again, and a lease never
//     turns valid again once its deadline passed;
//  4. liveness: after a calm period of 3 lease durations, every acquirable
//     ID is held while tasks are waiting for one.

var (
	simSeed  = flag.Int("sim.seed", -1, "replay this simulation seed in TestSimulationSeed")
	simSeeds = flag.Int("sim.seeds", 200, "seeds in TestSimulationSweep (SIM_SEEDS overrides)")
)

// simParams are the timing and fault rates of a run.
type simParams struct {
	seed        uint64
	clusterSize int
	tasks       int
	lease       time.Duration
	chaosFor    time.Duration // chaos phase; a calm phase of 3L follows
	maxDrift    float64       // each task's clock rate is within 1 ± maxDrift
	bugs        simBug        // deliberate provider bugs (simbugs builds only)
	wallOffsets bool          // tasks' wall clocks off by up to ±1 h
	// opaqueETags gives every write a new ETag; by default an ETag is the
	// MD5 of the body, as for a plain PUT on S3, so equal bodies share one.
	opaqueETags bool
}

func defaultSimParams(seed uint64) simParams {
	return simParams{seed: seed, clusterSize: 3, tasks: 4, lease: 3 * time.Second, chaosFor: 40 * time.Second,
		maxDrift: 0.02, wallOffsets: true}
}

type simTask struct {
	name     string
	provider *Provider
	clock    *simClock
	repo     *simRepo
	cancel   context.CancelFunc

	mu          sync.Mutex
	dead        bool      // crashed: no more requests, no release
	exited      bool      // lost its lease or crashed: ECS replaces it
	pausedUntil time.Time // frozen until then: no requests, answers or timer ticks
	held        []heldTick
	wasValid    bool
	expired     bool // Valid was seen false during a tenure
}

type heldTick struct {
	timer *simTimer
	at    time.Time
}

// holdTick keeps a timer tick that came during a pause; false if the task
// is running.
func (t *simTask) holdTick(tm *simTimer, v time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.pausedUntil.After(time.Now()) {
		return false
	}
	t.held = append(t.held, heldTick{tm, v})
	return true
}

// resume delivers the ticks held during a pause, in the order they fired.
func (w *simWorld) resume(t *simTask) {
	t.mu.Lock()
	if t.pausedUntil.After(time.Now()) { // paused again meanwhile
		pu := t.pausedUntil
		t.mu.Unlock()
		w.schedule(pu, "resume "+t.name, func() { w.resume(t) })
		return
	}
	held := t.held
	t.held = nil
	t.mu.Unlock()
	sort.SliceStable(held, func(i, j int) bool { return held[i].at.Before(held[j].at) })
	for i, h := range held {
		w.schedule(time.Now().Add(time.Duration(i+1)), "tick after pause", func() { h.timer.deliver(h.at) })
	}
}

func (t *simTask) crashed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.dead
}

func (t *simTask) tenureOver() bool {
	return t.provider != nil && t.provider.Err() != nil
}

// simClock is a task's clock: true (bubble) time at its own rate, with its
// own wall-clock offset. While its task is paused, its timers do not fire:
// a stopped process runs no code; they fire when it resumes.
type simClock struct {
	base   time.Time
	origin time.Time
	rate   float64
	task   *simTask
	done   chan struct{} // closed at the end of the run: timer goroutines exit
}

func (c *simClock) Now() time.Time {
	return c.origin.Add(time.Duration(float64(time.Since(c.base)) * c.rate))
}

func (c *simClock) NewTimer(d time.Duration) clock.Timer {
	t := &simTimer{t: time.NewTimer(c.real(d)), c: c, out: make(chan time.Time, 1)}
	go t.forward()
	return t
}

// real converts a duration on this clock to true time, rounding up so a
// timer never fires before the clock has reached its deadline.
func (c *simClock) real(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(float64(d)/c.rate)) + 1
}

type simTimer struct {
	t   *time.Timer
	c   *simClock
	out chan time.Time
}

// forward delivers the timer's ticks. A tick that comes while the task is
// paused is handed to the scheduler, which delivers the held ticks in order
// when the task resumes, one event each, so the replay stays deterministic.
func (t *simTimer) forward() {
	for {
		select {
		case v := <-t.t.C:
			if t.c.task.holdTick(t, v) {
				continue
			}
			t.deliver(v)
		case <-t.c.done:
			return
		}
	}
}

func (t *simTimer) deliver(v time.Time) {
	select {
	case t.out <- v:
	default:
	}
}

func (t *simTimer) C() <-chan time.Time { return t.out }
func (t *simTimer) Stop() bool          { return t.t.Stop() }

// Reset drops a tick not yet received, as the provider expects of a timer
// it re-arms. A tick held by a pause may still arrive late: the provider's
// loops treat every tick as "check the clock now", so that is harmless.
func (t *simTimer) Reset(d time.Duration) {
	select {
	case <-t.out:
	default:
	}
	t.t.Reset(t.c.real(d))
}

// simEvent is something the scheduler does at a moment of true time.
type simEvent struct {
	at    time.Time
	seq   uint64
	what  string
	apply func()
}

type eventQueue []*simEvent

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*simEvent)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type simWorld struct {
	p   simParams
	rng *rand.Rand

	mu        sync.Mutex // guards submitted and the tasks list against provider goroutines
	submitted []*simRequest
	wake      chan struct{}

	objects      map[int]*simObject
	marker       *simObject
	etagSeq      int
	maxVersion   map[int]Version
	deletedSince map[int]bool
	size         int

	events     eventQueue
	seq        uint64
	tasks      []*simTask
	nextTask   int
	running    sync.WaitGroup
	live       atomic.Int64
	trace      io.Writer
	hash       uint64
	steps      int
	violations []string
	calmFrom   time.Time
	start      time.Time
	wedged     bool
	clocksDone chan struct{}
}

func (w *simWorld) violate(format string, args ...any) {
	msg := fmt.Sprintf("t=%v: ", time.Since(w.start).Round(time.Millisecond)) + fmt.Sprintf(format, args...)
	w.violations = append(w.violations, msg)
	w.log("VIOLATION " + msg)
}

func (w *simWorld) log(s string) {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d %s", w.hash, s)
	w.hash = h.Sum64()
	if w.trace != nil {
		fmt.Fprintf(w.trace, "%9.3fs %s\n", time.Since(w.start).Seconds(), s)
	}
}

func (w *simWorld) schedule(at time.Time, what string, f func()) {
	w.seq++
	heap.Push(&w.events, &simEvent{at: at, seq: w.seq, what: what, apply: f})
}

func (w *simWorld) submit(req *simRequest) {
	w.mu.Lock()
	w.submitted = append(w.submitted, req)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// delay draws a one-way network delay: usually milliseconds, sometimes a
// spike of up to a second.
func (w *simWorld) delay() time.Duration {
	d := time.Duration(200+w.rng.IntN(20_000)) * time.Microsecond
	if w.rng.IntN(100) < 3 && time.Now().Before(w.calmFrom) {
		d += time.Duration(w.rng.Int64N(int64(time.Second)))
	}
	return d + time.Duration(w.rng.IntN(1000)) // nanoseconds keep events apart
}

// route decides the fate of newly submitted requests, in a deterministic
// order (task, then the task's own sequence).
func (w *simWorld) route(now time.Time) {
	w.mu.Lock()
	reqs := w.submitted
	w.submitted = nil
	w.mu.Unlock()
	sort.Slice(reqs, func(i, j int) bool {
		if reqs[i].task.name != reqs[j].task.name {
			return reqs[i].task.name < reqs[j].task.name
		}
		return reqs[i].seq < reqs[j].seq
	})
	for _, req := range reqs {
		req := req
		at := now.Add(w.delay())
		if pu := req.task.pausedUntilTime(); pu.After(at) {
			at = pu.Add(w.delay())
		}
		fate := w.rng.IntN(1000)
		if !now.Before(w.calmFrom) {
			fate = 999 // the calm phase has no network faults
		}
		label := fmt.Sprintf("%s#%d %s %d", req.task.name, req.seq, req.op, req.id)
		switch {
		case fate < 10: // lost on the way: the client times out
			w.log(label + " dropped")
			continue
		case fate < 20 && req.op >= opCreate: // refused before it is applied
			w.schedule(at, label, func() {
				w.deliver(req, simReply{err: &StorageError{Op: req.op.String(), Status: 503, Code: "SlowDown", Kind: ErrSlowDown}}, label)
			})
			continue
		case fate < 25 && req.op >= opCreate:
			w.schedule(at, label, func() {
				w.deliver(req, simReply{err: &StorageError{Op: req.op.String(), Status: 409, Code: "ConditionalRequestConflict", Kind: ErrConflict}}, label)
			})
			continue
		}
		loseAnswer := fate >= 25 && fate < 40
		duplicate := fate >= 40 && fate < 50
		w.schedule(at, label, func() {
			rep := w.serve(req, time.Now())
			w.log(label + " served: " + describeReply(rep))
			if duplicate {
				w.schedule(time.Now().Add(w.delay()), label+" dup", func() {
					dup := w.serve(req, time.Now())
					w.log(label + " duplicate served: " + describeReply(dup))
				})
			}
			if loseAnswer {
				w.log(label + " answer lost")
				return
			}
			w.schedule(time.Now().Add(w.delay()), label+" answer", func() { w.deliver(req, rep, label) })
		})
	}
}

func (w *simWorld) deliver(req *simRequest, rep simReply, label string) {
	if pu := req.task.pausedUntilTime(); pu.After(time.Now()) {
		w.schedule(pu.Add(w.delay()), label+" answer (after pause)", func() { w.deliver(req, rep, label) })
		return
	}
	req.reply <- rep // buffered; nobody may be waiting any more
}

func (t *simTask) pausedUntilTime() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pausedUntil
}

func (w *simWorld) config(name string, c *simClock, seed uint64) Config {
	return Config{
		TaskID:        name,
		ClusterSize:   w.size,
		LeaseDuration: w.p.lease,
		PollInterval:  w.p.lease / 6,
		Clock:         c,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		Rand:          rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	}
}

// startTask starts a new task that acquires and holds until it loses its
// lease or the run ends.
func (w *simWorld) startTask(stop <-chan struct{}) {
	w.nextTask++
	name := fmt.Sprintf("t%02d", w.nextTask)
	rate := 1 + (w.rng.Float64()*2-1)*w.p.maxDrift
	offset := time.Duration(0)
	if w.p.wallOffsets {
		offset = time.Duration(w.rng.IntN(3)-1) * time.Hour
	}
	c := &simClock{base: time.Now(), origin: time.Now().Add(offset), rate: rate, done: w.clocksDone}
	t := &simTask{name: name, clock: c}
	c.task = t
	t.repo = &simRepo{w: w, task: t}
	cfg := w.config(name, c, w.rng.Uint64())
	cfg.OnLost = func(error) { w.taskExited(t) }
	p, err := NewProvider(t.repo, cfg)
	if err != nil {
		panic(err)
	}
	t.provider = p
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	w.mu.Lock()
	w.tasks = append(w.tasks, t)
	w.mu.Unlock()
	w.log(fmt.Sprintf("start %s rate=%.4f offset=%v", name, rate, offset))
	w.running.Add(1)
	w.live.Add(1)
	go func() {
		defer w.running.Done()
		defer w.live.Add(-1)
		if _, err := p.Acquire(ctx); err != nil {
			return
		}
		select {
		case <-p.Done():
		case <-stop:
		}
		// Release (a crashed task's release fails, as it would) and wait for
		// the provider's goroutines: the bubble must end empty.
		cctx, ccancel := context.WithTimeout(context.Background(), 3*w.p.lease)
		_ = p.Close(cctx)
		ccancel()
	}()
}

// taskExited is OnLost: the process exits and ECS starts a replacement.
func (w *simWorld) taskExited(t *simTask) {
	t.mu.Lock()
	t.exited = true
	t.mu.Unlock()
	t.cancel()
}

// checkInvariants runs after every event, with every goroutine waiting.
func (w *simWorld) checkInvariants() {
	holders := map[int][]string{}
	for _, t := range w.tasks {
		p := t.provider
		valid := p.Valid()
		inTenure := p.Instance().Version > 0 && p.Err() == nil
		t.mu.Lock()
		if t.wasValid && !valid && inTenure {
			t.expired = true
		}
		if valid && t.expired {
			w.violate("task %s: lease of %v valid again after its deadline had passed", t.name, p.Instance())
			t.expired = false
		}
		t.wasValid = valid
		t.mu.Unlock()
		if valid {
			id := p.Instance().ID
			holders[id] = append(holders[id], fmt.Sprintf("%s(v%d)", t.name, p.Instance().Version))
		}
	}
	for id, hs := range holders {
		if len(hs) > 1 {
			w.violate("node %d held by %v at once", id, hs)
		}
	}
}

// checkLiveness runs at the end of the calm phase.
func (w *simWorld) checkLiveness() {
	waiting, held := 0, map[int]bool{}
	for _, t := range w.tasks {
		t.mu.Lock()
		gone := t.exited || t.dead
		t.mu.Unlock()
		if gone {
			continue
		}
		if t.provider.Valid() {
			held[t.provider.Instance().ID] = true
		} else if t.provider.Instance().Version == 0 {
			waiting++
		}
	}
	free := 0
	for id := 0; id < w.size; id++ {
		// An operator's scale that failed half-way may leave IDs unusable.
		if o, ok := w.objects[id]; !held[id] && (!ok || o.meta[MetaAcquirable] != "false") {
			free++
		}
	}
	if waiting > 0 && free > 0 {
		var objs []string
		for id := 0; id < w.size; id++ {
			if o, ok := w.objects[id]; ok {
				objs = append(objs, fmt.Sprintf("%d:%s/v%s/acq=%s/lm=%v", id, o.meta[MetaTaskID], o.meta[MetaVersion], o.meta[MetaAcquirable], time.Since(o.lastModified).Round(time.Second)))
			} else {
				objs = append(objs, fmt.Sprintf("%d:missing", id))
			}
		}
		w.violate("liveness: %d task(s) waiting while %d of %d IDs are free after a calm period of %v; objects %v", waiting, free, w.size, 3*w.p.lease, objs)
	}
}

// chaos schedules the outside events of one run from the seed.
func (w *simWorld) chaos(stop <-chan struct{}) {
	for at := w.start.Add(2 * time.Second); at.Before(w.calmFrom); at = at.Add(time.Duration(w.rng.Int64N(int64(6 * time.Second)))) {
		kind := w.rng.IntN(100)
		pick := w.rng.IntN(1 << 20)
		dur := w.p.lease/2 + time.Duration(w.rng.Int64N(int64(2*w.p.lease)))
		id := w.rng.IntN(4)
		w.schedule(at, "chaos", func() {
			alive := w.aliveTasks()
			if len(alive) == 0 {
				return
			}
			t := alive[pick%len(alive)]
			switch {
			case kind < 30:
				t.mu.Lock()
				t.pausedUntil = time.Now().Add(dur)
				t.mu.Unlock()
				w.schedule(time.Now().Add(dur), "resume "+t.name, func() { w.resume(t) })
				w.log(fmt.Sprintf("chaos: pause %s for %v", t.name, dur))
			case kind < 45:
				t.mu.Lock()
				t.dead, t.exited = true, true
				t.mu.Unlock()
				t.cancel()
				w.log("chaos: crash " + t.name)
			case kind < 60:
				w.log("chaos: " + w.outsideWrite(id%w.size, time.Now(), false))
			case kind < 65:
				w.log("chaos: " + w.outsideWrite(id%w.size, time.Now(), true))
			case kind < 75:
				size := 2 + pick%3
				w.log(fmt.Sprintf("chaos: scale to %d", size))
				w.scale(size)
			}
		})
	}
	// Replacements: keep p.tasks live tasks, as ECS would.
	for at := w.start.Add(time.Second); at.Before(w.calmFrom.Add(w.p.lease)); at = at.Add(time.Second) {
		w.schedule(at, "replace", func() {
			for len(w.aliveTasks()) < w.p.tasks {
				w.startTask(stop)
			}
		})
	}
}

// scale changes the cluster size through the real Scale, run by an
// operator whose requests travel like everyone's.
func (w *simWorld) scale(size int) {
	w.size = size
	admin := &simTask{name: "admin"}
	admin.repo = &simRepo{w: w, task: admin}
	rng := rand.New(rand.NewPCG(w.rng.Uint64(), 0)) // nonces: deterministic, used by one goroutine
	nonce := func() string { return fmt.Sprintf("%016x%016x", rng.Uint64(), rng.Uint64()) }
	w.running.Add(1)
	go func() {
		defer w.running.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = scale(ctx, admin.repo, size, "admin", w.p.lease, nonce)
	}()
	for _, t := range w.tasks {
		t.provider.mu.Lock()
		if t.provider.state == stateAcquiring || t.provider.state == stateIdle {
			t.provider.cfg.ClusterSize = size // tasks are redeployed with the new size
		}
		t.provider.mu.Unlock()
	}
}

func (w *simWorld) aliveTasks() []*simTask {
	var out []*simTask
	for _, t := range w.tasks {
		t.mu.Lock()
		if !t.exited && !t.dead {
			out = append(out, t)
		}
		t.mu.Unlock()
	}
	return out
}

// simResult is what one run found.
type simResult struct {
	violations []string
	steps      int
	hash       uint64
}

// runSim runs one seed inside a synctest bubble.
func runSim(t *testing.T, p simParams, trace io.Writer) simResult {
	var res simResult
	setSimBugs(t, p.bugs)
	defer setSimBugs(t, 0)
	synctest.Test(t, func(t *testing.T) {
		w := &simWorld{p: p, rng: rand.New(rand.NewPCG(p.seed, 0x5eed)), wake: make(chan struct{}, 1),
			objects: map[int]*simObject{}, maxVersion: map[int]Version{}, deletedSince: map[int]bool{},
			size: p.clusterSize, trace: trace, start: time.Now(), clocksDone: make(chan struct{})}
		w.calmFrom = w.start.Add(p.chaosFor)
		end := w.calmFrom.Add(3*p.lease + p.lease/3)
		stop := make(chan struct{})
		w.chaos(stop)
		for i := 0; i < p.tasks; i++ {
			w.startTask(stop)
		}
		liveChecked, stopped := false, false
		for {
			synctest.Wait()
			w.route(time.Now())
			w.checkInvariants()
			if !liveChecked && !time.Now().Before(end) {
				w.checkLiveness()
				liveChecked = true
			}
			if liveChecked && !stopped {
				stopped = true
				close(stop)
				for _, tk := range w.tasks {
					tk.cancel()
				}
			}
			if stopped && w.live.Load() == 0 && len(w.events) == 0 {
				break
			}
			if time.Since(end) > 10*p.lease && !w.wedged {
				w.wedged = true
				w.violate("tasks did not stop within %v of the end of the run", 10*p.lease)
				for _, tk := range w.tasks {
					tk.mu.Lock()
					tk.dead = true
					tk.mu.Unlock()
				}
			}
			var next <-chan time.Time
			if len(w.events) > 0 {
				next = time.After(time.Until(w.events[0].at))
			} else if !liveChecked {
				next = time.After(time.Until(end))
			} else {
				next = time.After(w.p.lease)
			}
			select {
			case <-w.wake:
				continue
			case <-next:
			}
			for len(w.events) > 0 && !w.events[0].at.After(time.Now()) {
				e := heap.Pop(&w.events).(*simEvent)
				w.steps++
				e.apply()
				synctest.Wait()
				w.route(time.Now())
				w.checkInvariants()
			}
		}
		w.running.Wait()
		close(w.clocksDone)
		res = simResult{violations: w.violations, steps: w.steps, hash: w.hash}
	})
	return res
}

func sweepSeeds() int {
	if s := os.Getenv("SIM_SEEDS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil {
			return n
		}
	}
	return *simSeeds
}

func TestSimulationSweep(t *testing.T) {
	seeds := sweepSeeds()
	start := time.Now()
	steps := 0
	for seed := 1; seed <= seeds; seed++ {
		res := runSim(t, defaultSimParams(uint64(seed)), nil)
		steps += res.steps
		if len(res.violations) > 0 {
			t.Fatalf("seed %d: %d violation(s), first: %s\nreproduce: go test ./nodeid -run 'TestSimulationSeed$' -sim.seed=%d -v",
				seed, len(res.violations), res.violations[0], seed)
		}
	}
	el := time.Since(start)
	t.Logf("simulation: %d schedules explored, %d steps, %.0f steps/s, %.1f simulated minutes per second of real time",
		seeds, steps, float64(steps)/el.Seconds(),
		float64(seeds)*(defaultSimParams(0).chaosFor+4*defaultSimParams(0).lease).Minutes()/el.Seconds())
}

// TestSimulationSeed replays one seed with its trace: -sim.seed=N -v.
func TestSimulationSeed(t *testing.T) {
	if *simSeed < 0 {
		t.Skip("set -sim.seed=N to replay a seed")
	}
	res := runSim(t, defaultSimParams(uint64(*simSeed)), testWriter{t})
	for _, v := range res.violations {
		t.Error(v)
	}
}

func TestSimulationIsDeterministic(t *testing.T) {
	for _, seed := range []uint64{3, 17, 18, 43, 89, 150} {
		a := runSim(t, defaultSimParams(seed), nil)
		b := runSim(t, defaultSimParams(seed), nil)
		if a.hash != b.hash || a.steps != b.steps {
			t.Fatalf("seed %d ran differently twice: %d steps (hash %x) vs %d steps (hash %x)", seed, a.steps, a.hash, b.steps, b.hash)
		}
		if a.steps < 100 {
			t.Fatalf("seed %d: only %d steps; the simulation did not run", seed, a.steps)
		}
	}
}

// The checker has teeth: each deliberate bug is found within a seed budget.
// The bugs exist only with -tags simbugs.
func TestSimulationFindsDeliberateBugs(t *testing.T) {
	if !simBugsBuild {
		t.Skip("the deliberate bugs need -tags simbugs")
	}
	cases := []struct {
		name string
		bug  simBug
		want string // the kind of violation the bug must cause
	}{
		{"no self-fence margin", bugNoMargin, "at once"},
		{"expiry judged by comparing wall clocks", bugWallClockExpiry, "at once"},
		{"renewing after the deadline", bugRenewAfterDeadline, "valid again after its deadline"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for seed := 1; seed <= 300; seed++ {
				p := defaultSimParams(uint64(seed))
				p.bugs = c.bug
				if c.bug == bugNoMargin {
					p.maxDrift = 0.05 // realistic drift is smaller; the margin is what covers it
				}
				res := runSim(t, p, nil)
				for _, v := range res.violations {
					if strings.Contains(v, c.want) {
						t.Logf("found at seed %d: %s", seed, v)
						return
					}
				}
			}
			t.Fatalf("no %q violation found in 300 seeds", c.want)
		})
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(string(b[:len(b)-1]))
	return len(b), nil
}
