package nodeid

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nodeid/nodeid/internal/camunda"
)

// Camunda 8.9 brokers in the simulation (docs/simulation.md, "Camunda
// brokers"): in a share of the seeds some of the tasks ECS starts are
// Camunda brokers following the rules of Camunda 8.9's S3 node-ID provider,
// as internal/camunda's Broker models them for real S3, sharing the bucket
// with nodeid tasks under the conditions of docs/design.md, "Mixed operation
// with Camunda 8.9". Their requests travel through the same simulated S3
// (delays, drops, duplicates, lost answers, stale nothing: Camunda does not
// list), they pause, crash, stop and are replaced like nodeid tasks, and
// they write Camunda's bytes: camunda.LeaseBody for a held lease, an empty
// body for a release. They read with camunda.ReadLease (Camunda's strict
// reading rules).
//
// A broker runs on a goroutine of its own, as a nodeid task's provider
// does, and like a provider it reaches the world only through its requests
// and through effects it posts (simWorld.post): its log lines, counts, the
// belief the checker reads and its exit are applied by the scheduler, at the
// instant the broker posted them, in a deterministic order.

// simCamunda is the state of one Camunda broker's node-ID provider.
type simCamunda struct {
	lease time.Duration // Lc
	// offset of its wall clock from true time, fixed for its life: wall
	// clocks are disciplined by time sync; its timers run on the task's
	// drifting monotonic clock like a nodeid task's.
	offset  time.Duration
	timeout time.Duration // per request, as internal/camunda's DefaultRequestTimeout
	close   time.Duration // how long its process runs on after it learns of a loss

	// The broker's own state, used by its goroutine; mu because the
	// scheduler redeploys a broker that holds nothing with a new size.
	mu      sync.Mutex
	n       int  // the cluster size it was deployed with
	held    bool // from the acquire's answer until a loss is seen or the release
	id      int
	version int64
	expiry  int64 // ms, by its wall clock: the timestamp it last wrote successfully
	etag    string
	known   map[int32]int64 // what renewals write: empty, as Camunda's membership starts

	// belief is the world's record of the broker's belief, which the
	// checker reads: the scheduler's alone, changed only by the effects the
	// broker posts as it changes held, id, version and expiry above.
	belief camundaBelief
}

type camundaBelief struct {
	held    bool
	id      int
	version int64
	expiry  int64
}

func (c *simCamunda) wallMillis() int64 { return time.Now().Add(c.offset).UnixMilli() }

// believes reports whether the broker considers itself the holder now: from
// its successful acquire until its own wall clock passes the timestamp it
// last wrote, or a renewal fails, or it releases. Camunda has no safety
// margin. The scheduler's (from c.belief).
func (c *simCamunda) believes() (id int, version int64, ok bool) {
	b := c.belief
	return b.id, b.version, b.held && c.wallMillis() <= b.expiry
}

// disbelieve posts the end of t's belief (a loss seen, or a release).
func (w *simWorld) disbelieve(t *simTask) {
	w.post(t, func() { t.cam.belief.held = false })
}

func camundaHeldMeta(taskID string, version int64) map[string]string {
	return map[string]string{camunda.MetaTaskID: taskID, camunda.MetaVersion: strconv.FormatInt(version, 10), camunda.MetaAcquirable: "true"}
}

func camundaReleasedMeta(version int64) map[string]string {
	return map[string]string{camunda.MetaTaskID: "", camunda.MetaVersion: strconv.FormatInt(version, 10), camunda.MetaAcquirable: "true"}
}

// startCamunda starts a Camunda broker named name.
func (w *simWorld) startCamunda(stop <-chan struct{}, name string, rate float64, offset time.Duration) {
	c := &simCamunda{lease: w.p.camundaLease, offset: offset, timeout: camunda.DefaultRequestTimeout,
		close: time.Duration(w.rng.Int64N(int64(2500 * time.Millisecond))), n: w.size}
	clk := &simClock{base: time.Now(), origin: time.Now().Add(offset), rate: rate, done: w.clocksDone}
	t := &simTask{name: name, clock: clk, stopReq: make(chan struct{}), cam: c}
	clk.task = t
	t.repo = &simRepo{w: w, task: t}
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	w.mu.Lock()
	w.tasks = append(w.tasks, t)
	w.mu.Unlock()
	w.count("camunda brokers started")
	w.log(fmt.Sprintf("start camunda %s Lc=%v rate=%.4f wall offset=%v", name, c.lease, rate, offset))
	w.running.Add(1)
	w.live.Add(1)
	go func() {
		defer w.running.Done()
		defer w.live.Add(-1)
		if !w.camundaAcquire(ctx, t, stop) {
			return
		}
		c.mu.Lock()
		inst := NodeInstance{ID: c.id, Version: Version(c.version)}
		c.mu.Unlock()
		t.repo.prepare(inst, false) // Camunda's preparation never refuses
		tm := t.clock.NewTimer(c.lease / 3)
		defer tm.Stop()
		for {
			select {
			case <-tm.C():
			case <-ctx.Done():
			}
			switch {
			case t.crashed():
				return
			case closed(t.stopReq):
				// Graceful shutdown, as internal/camunda's Run and Release:
				// renewals stop, the broker closes (its process writes for
				// stopTime), then it releases if its lease is still valid
				// by its clock; after a slow close it releases nothing.
				t.repo.stopGroup()
				w.camundaRelease(t)
				return
			case closed(stop):
				w.camundaRelease(t)
				return
			}
			if err := w.camundaRenew(t); err != nil {
				w.post(t, func() {
					w.log(fmt.Sprintf("camunda %s: %v", t.name, err))
					w.count("camunda leases lost")
					t.mu.Lock()
					t.exited = true
					if !t.groupGone {
						t.groupUntil = time.Now().Add(c.close) // Camunda's slow close after a loss
					}
					t.mu.Unlock()
				})
				t.cancel()
				return
			}
			tm.Reset(c.lease / 3)
		}
	}()
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (c *simCamunda) reqCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), c.timeout)
}

// camundaAcquire repeats rounds of Camunda's acquire until one takes a node
// ID; false if the broker crashed or was stopped first. Between rounds it
// backs off 250 ms doubling up to Lc (Camunda's lease-acquire-max-delay,
// default 30 s, set to Lc here so brokers take part in a 30-50 s run).
func (w *simWorld) camundaAcquire(ctx context.Context, t *simTask, stop <-chan struct{}) bool {
	c := t.cam
	backoff := 250 * time.Millisecond
	for {
		if ctx.Err() != nil || closed(stop) {
			return false
		}
		ok, why := w.camundaRound(t)
		if ok {
			return true
		}
		if why != "" {
			w.post(t, func() { w.log(fmt.Sprintf("camunda %s: acquire round failed: %s", t.name, why)) })
		}
		tm := t.clock.NewTimer(backoff)
		select {
		case <-tm.C():
		case <-ctx.Done():
		}
		tm.Stop()
		backoff = min(2*backoff, c.lease)
	}
}

// camundaRound is one round of Camunda's acquire, as internal/camunda's
// Broker.Acquire: IDs in order; GET each; if not valid by the broker's
// wall clock and acquirable, PUT If-Match the ETag read, version + 1,
// timestamp now + Lc. A failed PUT moves on; a failed or unreadable GET
// fails the round.
func (w *simWorld) camundaRound(t *simTask) (bool, string) {
	c := t.cam
	c.mu.Lock()
	n := c.n
	c.mu.Unlock()
	for id := range n {
		if t.crashed() {
			return false, ""
		}
		ctx, cancel := c.reqCtx()
		body, meta, etag, err := t.repo.rawGet(ctx, id)
		cancel()
		if err != nil {
			return false, fmt.Sprintf("get %d: %v", id, err)
		}
		s, err := camunda.ReadLease(body, meta)
		if err != nil {
			return false, fmt.Sprintf("read %d: %v", id, err)
		}
		now := c.wallMillis()
		if s.ValidAt(now) || !s.Acquirable {
			continue
		}
		v := s.Version + 1
		expiry := now + c.lease.Milliseconds()
		lease := camunda.LeaseBody(t.name, expiry, id, v, map[int32]int64{int32(id): v})
		ctx, cancel = c.reqCtx()
		newTag, err := t.repo.rawPut(ctx, id, lease, camundaHeldMeta(t.name, v), etag)
		cancel()
		if err != nil {
			continue
		}
		c.mu.Lock()
		c.held, c.id, c.version, c.expiry, c.etag = true, id, v, expiry, newTag
		c.mu.Unlock()
		w.post(t, func() {
			c.belief = camundaBelief{held: true, id: id, version: v, expiry: expiry}
			w.count("camunda acquisitions")
		})
		return true, ""
	}
	return false, ""
}

// camundaRenew is Camunda's renewal: lost if its own lease is no longer
// valid by its clock, else an If-Match PUT of now + Lc; any failure (412,
// 404, timeout, 5xx) is a loss.
func (w *simWorld) camundaRenew(t *simTask) error {
	c := t.cam
	c.mu.Lock()
	now := c.wallMillis()
	if !c.held {
		c.mu.Unlock()
		return fmt.Errorf("no lease held")
	}
	if now > c.expiry {
		c.held = false
		c.mu.Unlock()
		w.disbelieve(t)
		return fmt.Errorf("node %d expired at %d, now %d", c.id, c.expiry, now)
	}
	id, version, etag := c.id, c.version, c.etag
	expiry := now + c.lease.Milliseconds()
	body := camunda.LeaseBody(t.name, expiry, id, version, c.known)
	c.mu.Unlock()
	ctx, cancel := c.reqCtx()
	newTag, err := t.repo.rawPut(ctx, id, body, camundaHeldMeta(t.name, version), etag)
	cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.held = false
		w.disbelieve(t)
		return fmt.Errorf("renew node %d: %v", id, err)
	}
	c.expiry, c.etag = expiry, newTag
	w.post(t, func() { c.belief.expiry = expiry })
	return nil
}

// camundaRelease is Camunda's graceful release: if the lease is still valid
// by its clock, an If-Match PUT of an empty body, taskid "", the version
// kept. Every such body has one ETag, the MD5 of "".
func (w *simWorld) camundaRelease(t *simTask) {
	c := t.cam
	c.mu.Lock()
	held, id, version, etag, expiry := c.held, c.id, c.version, c.etag, c.expiry
	c.held = false
	c.mu.Unlock()
	if !held {
		return
	}
	w.disbelieve(t)
	if c.wallMillis() > expiry {
		return
	}
	ctx, cancel := c.reqCtx()
	defer cancel()
	if _, err := t.repo.rawPut(ctx, id, nil, camundaReleasedMeta(version), etag); err == nil {
		w.post(t, func() { w.count("camunda releases") })
	}
}

// prepareCamunda prepares a Camunda tenure's data directory as Camunda 8.9
// does (docs/datadir.md, "Camunda 8.9 data roots"): an existing valid vK is
// used as it is, otherwise vK is copied from the newest version below; it
// never refuses, and newer versions do not stop it.
func (w *simWorld) prepareCamunda(t *simTask, inst NodeInstance) {
	n, k := inst.ID, inst.Version
	dirs := w.dirs[n]
	if dirs == nil {
		dirs = map[Version]*simDir{}
		w.dirs[n] = dirs
	}
	d, from := dirs[k], fmt.Sprintf("v%d (already there)", k)
	if d == nil {
		var best Version
		for v := range dirs {
			if v < k && v > best {
				best = v
			}
		}
		d, from = &simDir{}, "empty"
		if best > 0 {
			d.stamp, from = dirs[best].stamp, fmt.Sprintf("v%d", best)
		}
		dirs[k] = d
	}
	if d.stamp < w.newest[n] {
		t.forked = true
		w.weakness("node %d: Camunda %s's tenure v%d starts from %s (data write #%d), older than the newest complete data (#%d): data lost", n, t.name, k, from, d.stamp, w.newest[n])
	}
	if cur := w.lastTenure[n]; cur != nil && cur != t && cur.inst.Version > k {
		// A broker paused between its take and its start acts on a
		// version below a later holder's (its lease expired meanwhile):
		// Camunda does not fence itself. That holder stays the current
		// tenure; this one's writes count as Camunda's weakness.
		w.weakness("node %d: Camunda %s's tenure v%d starts below %s's v%d (a stale take used after a pause; no self-fencing)", n, t.name, k, cur.name, cur.inst.Version)
	} else {
		w.lastTenure[n] = t
	}
	t.mu.Lock()
	t.prepared, t.inst = true, inst
	t.mu.Unlock()
	w.schedule(time.Now().Add(w.groupInterval()), "group "+t.name, func() { w.groupWrite(t) })
}
