package nodeid_test

// Adversarial review: a suspended host (a VM paused by its hypervisor, a
// hibernated instance). clock.Real() reads CLOCK_BOOTTIME, which keeps
// counting while the machine is suspended. Its timers were Go runtime
// timers, which run on CLOCK_MONOTONIC (runtime.nanotime), which stops while
// suspended: after a suspend every timer of the provider (watchdog, renew
// loop, retries) fired late by the time that was left when the machine fell
// asleep. clock.Real's timers are now timerfds on CLOCK_BOOTTIME
// (clock.TestBootTimerFiresStopsAndResets checks that). A machine cannot be
// suspended in a test, so suspendClock models both kinds of timer.

import (
	"sync"
	"testing"
	"time"

	"github.com/nodeid/nodeid/clock"
	"github.com/nodeid/nodeid/internal/faultproxy"
	"github.com/nodeid/nodeid/internal/s3test"
)

// suspendClock is clock.Real() on a host that can be suspended: Now counts
// on through a suspend (CLOCK_BOOTTIME); timers count on it too if
// bootTimers, otherwise they stop during a suspend (CLOCK_MONOTONIC, what
// Go's timers use). Outside a suspend it is clock.Real().
type suspendClock struct {
	real       clock.Clock
	bootTimers bool

	mu          sync.Mutex
	suspended   bool
	suspendedAt time.Time
	lost        time.Duration // total time spent suspended
	timers      map[*suspendTimer]bool
	stopTick    chan struct{}
}

func newSuspendClock(t *testing.T, bootTimers bool) *suspendClock {
	c := &suspendClock{real: clock.Real(), bootTimers: bootTimers, timers: map[*suspendTimer]bool{}, stopTick: make(chan struct{})}
	go c.tick()
	t.Cleanup(func() { close(c.stopTick) })
	return c
}

func (c *suspendClock) Now() time.Time { return c.real.Now() }

// monoLocked is the timers' clock: CLOCK_BOOTTIME, or CLOCK_MONOTONIC
// (boottime minus the time spent suspended).
func (c *suspendClock) monoLocked() time.Time {
	now := c.real.Now()
	if c.bootTimers {
		return now
	}
	if c.suspended {
		return c.suspendedAt.Add(-c.lost)
	}
	return now.Add(-c.lost)
}

func (c *suspendClock) suspend() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.suspended, c.suspendedAt = true, c.real.Now()
}

func (c *suspendClock) resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lost += c.real.Now().Sub(c.suspendedAt)
	c.suspended = false
}

func (c *suspendClock) tick() {
	for {
		select {
		case <-c.stopTick:
			return
		case <-time.After(time.Millisecond):
		}
		c.mu.Lock()
		mono := c.monoLocked()
		for tm := range c.timers {
			if !tm.when.After(mono) {
				delete(c.timers, tm)
				select {
				case tm.c <- c.real.Now():
				default:
				}
			}
		}
		c.mu.Unlock()
	}
}

type suspendTimer struct {
	c    chan time.Time
	clk  *suspendClock
	when time.Time // on the monotonic clock
}

func (c *suspendClock) NewTimer(d time.Duration) clock.Timer {
	tm := &suspendTimer{c: make(chan time.Time, 1), clk: c}
	tm.Reset(d)
	return tm
}

func (tm *suspendTimer) C() <-chan time.Time { return tm.c }

func (tm *suspendTimer) Stop() bool {
	tm.clk.mu.Lock()
	defer tm.clk.mu.Unlock()
	active := tm.clk.timers[tm]
	delete(tm.clk.timers, tm)
	return active
}

func (tm *suspendTimer) Reset(d time.Duration) {
	tm.clk.mu.Lock()
	defer tm.clk.mu.Unlock()
	tm.when = tm.clk.monoLocked().Add(d)
	tm.clk.timers[tm] = true
}

// Schedule: the holder's host is suspended right after a renewal (it
// sends nothing while suspended: its S3 traffic is blackholed). Another
// host's task takes node 0 after L + 1 s by S3's clock. The holder's host
// resumes at that moment. Valid() is false at once (it reads
// CLOCK_BOOTTIME), but the tenure is not ended: Done() stays open, Err()
// is nil and OnLost, which under `nodeid-init run` SIGKILLs the broker, runs
// only when the renew timer or the watchdog fires, up to R (the renew
// timer; the watchdog up to L - m) of monotonic time after the resume. The
// broker keeps writing all that time while the successor is valid
// (invariants 1 and 4). design.md, failure table: "holder paused ... longer
// than L: on resume its deadline has passed: Valid() false, watchdog fires".
func TestSuspendedHolderIsStoppedOnResume(t *testing.T) {
	srv := s3test.NewFake(t)
	proxy := startProxy(t, srv)
	clk := newSuspendClock(t, true) // as clock.Real; false fails this test
	lost := newLossRecorder()
	cfg := fastConfig(t, "holder", 1, lost)
	// R large against the test's scheduling noise: L=3s, R=1.2s, m=600ms.
	cfg.LeaseDuration, cfg.RenewInterval, cfg.SafetyMargin, cfg.RequestTimeout = 3*time.Second, 1200*time.Millisecond, 600*time.Millisecond, 500*time.Millisecond
	cfg.Clock = clk
	holder := newProvider(t, newRepo(t, srv, proxy.URL), cfg)
	acquire(t, holder, 5*time.Second)

	// Suspend right after a renewal, so nothing is in flight.
	r := holder.Stats().Renewals
	waitFor(t, 5*time.Second, "a renewal", func() bool { return holder.Stats().Renewals > r })
	proxy.Set(faultproxy.Fault{Blackhole: true})
	clk.suspend()
	suspended := time.Now()

	spareCfg := fastConfig(t, "spare", 1, nil)
	spareCfg.LeaseDuration, spareCfg.RenewInterval, spareCfg.SafetyMargin, spareCfg.RequestTimeout = cfg.LeaseDuration, cfg.RenewInterval, cfg.SafetyMargin, cfg.RequestTimeout
	spare := newProvider(t, newRepo(t, srv, ""), spareCfg)
	inst := acquire(t, spare, 15*time.Second)
	t.Logf("spare took %v %v after the suspend", inst, time.Since(suspended).Round(time.Millisecond))

	// The host resumes.
	clk.resume()
	proxy.Pass()
	resumed := time.Now()
	if holder.Valid() {
		t.Fatal("holder valid after resuming past its deadline")
	}
	// The holder had all of the suspend to notice; on resume it must end the
	// tenure (OnLost: kill the broker) at once. Timers that stop during a
	// suspend fire about R after the resume (the renew timer was reset just
	// before it); R/2 tells the two apart and leaves room for a loaded
	// machine.
	select {
	case <-holder.Done():
	case <-time.After(cfg.RenewInterval / 2):
		both := spare.Valid()
		<-holder.Done()
		t.Fatalf("after resuming, the holder's tenure ended only %v later (Err()=nil, OnLost not run, its broker still running) while the spare (valid=%v) held %v",
			time.Since(resumed).Round(time.Millisecond), both, inst)
	}
}
