// Package clock gives the lease protocol its notion of time behind an
// interface, so tests and simulations can run it on a fake clock.
//
// Durations are always measured as the difference of two Now() readings of
// the same Clock. The real clock counts on CLOCK_BOOTTIME, so a step of the
// wall clock (NTP, an operator, a skewed host) never changes a measured
// duration, and a suspend of the machine counts as time that passed: a
// holder whose machine slept past its deadline finds it passed on waking.
package clock

import "time"

// Clock is the source of time for one task.
type Clock interface {
	// Now returns the current time. Only differences of two readings are
	// trusted; the wall-clock part is informational.
	Now() time.Time
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) Timer
}

// Timer is the subset of *time.Timer the protocol needs.
type Timer interface {
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it was active.
	Stop() bool
	// Reset re-arms the timer to fire after d.
	Reset(d time.Duration)
}

// Real returns the system clock: the wall time at the call, advanced by
// CLOCK_BOOTTIME since then, with timers on CLOCK_BOOTTIME too. Go's own
// monotonic reading and timers (CLOCK_MONOTONIC) stop while the machine is
// suspended: a watchdog due during a suspend would fire only after the time
// that was left when the machine fell asleep, and a holder would keep its
// broker running that long after waking, although its lease had expired for
// everyone else.
func Real() Clock {
	return realClock{wall0: time.Now().Round(0), boot0: SystemBoottime()}
}

type realClock struct {
	wall0 time.Time     // wall clock at creation, without Go's monotonic reading
	boot0 time.Duration // CLOCK_BOOTTIME at creation
}

func (c realClock) Now() time.Time { return c.wall0.Add(SystemBoottime() - c.boot0) }

func (c realClock) NewTimer(d time.Duration) Timer {
	t, err := newBootTimer(d, c.Now)
	if err != nil {
		// Out of file descriptors: a Go timer is better than none.
		return &realTimer{t: time.NewTimer(d)}
	}
	return t
}

type realTimer struct{ t *time.Timer }

func (r *realTimer) C() <-chan time.Time   { return r.t.C }
func (r *realTimer) Stop() bool            { return r.t.Stop() }
func (r *realTimer) Reset(d time.Duration) { r.t.Reset(d) }

// WithOffset returns c with its wall clock shifted by offset. Durations are
// unchanged. Tests use it for a task whose wall clock is wrong.
func WithOffset(c Clock, offset time.Duration) Clock { return offsetClock{c, offset} }

type offsetClock struct {
	Clock
	offset time.Duration
}

func (o offsetClock) Now() time.Time { return o.Clock.Now().Add(o.offset) }
