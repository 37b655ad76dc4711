// Package clocktest is a manually advanced clock.Clock for deterministic
// tests. It lives apart from package clock so that no production binary
// links it.
package clocktest

import (
	"sort"
	"sync"
	"time"

	"github.com/nodeid/nodeid/clock"
)

// Fake is a manually advanced clock for deterministic tests. Timers fire
// when Advance moves the time past their deadline.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced whenever timers change
}

// NewFake returns a fake clock set to start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, changed: make(chan struct{})}
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer driven by Advance.
func (f *Fake) NewTimer(d time.Duration) clock.Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, c: make(chan time.Time, 1)}
	f.arm(t, d)
	return t
}

// Advance moves the clock forward by d, firing every timer that falls due,
// in deadline order.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	target := f.now.Add(d)
	for {
		sort.Slice(f.timers, func(i, j int) bool { return f.timers[i].when.Before(f.timers[j].when) })
		if len(f.timers) == 0 || f.timers[0].when.After(target) {
			break
		}
		t := f.timers[0]
		f.timers = f.timers[1:]
		f.now = t.when
		t.active = false
		select {
		case t.c <- t.when:
		default:
		}
	}
	f.now = target
	f.notify()
}

// Timers returns how many timers are armed.
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// WaitForTimers blocks until at least n timers are armed or timeout (real
// time) passes, and reports whether n was reached. Tests use it to know that
// the code under test is waiting before they advance the clock.
func (f *Fake) WaitForTimers(n int, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		armed, ch := len(f.timers), f.changed
		f.mu.Unlock()
		if armed >= n {
			return true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return false
		}
	}
}

func (f *Fake) arm(t *fakeTimer, d time.Duration) {
	t.when = f.now.Add(d)
	if !t.active {
		t.active = true
		f.timers = append(f.timers, t)
	}
	f.notify()
}

func (f *Fake) disarm(t *fakeTimer) bool {
	if !t.active {
		return false
	}
	t.active = false
	for i, o := range f.timers {
		if o == t {
			f.timers = append(f.timers[:i], f.timers[i+1:]...)
			break
		}
	}
	f.notify()
	return true
}

func (f *Fake) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

type fakeTimer struct {
	f      *Fake
	c      chan time.Time
	when   time.Time
	active bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.f.disarm(t)
}

func (t *fakeTimer) Reset(d time.Duration) {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	// Drain a stale tick so the next receive sees the new deadline only.
	select {
	case <-t.c:
	default:
	}
	t.f.arm(t, d)
}
