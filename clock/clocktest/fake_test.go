package clocktest_test

import (
	"testing"
	"time"

	"github.com/nodeid/nodeid/clock"
	"github.com/nodeid/nodeid/clock/clocktest"
)

func TestFakeTimersFireInOrderOnAdvance(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := clocktest.NewFake(start)
	a := f.NewTimer(2 * time.Second)
	b := f.NewTimer(time.Second)
	f.Advance(999 * time.Millisecond)
	select {
	case <-b.C():
		t.Fatal("fired early")
	default:
	}
	f.Advance(time.Millisecond)
	if got := <-b.C(); !got.Equal(start.Add(time.Second)) {
		t.Fatalf("b fired at %v", got)
	}
	if f.Timers() != 1 {
		t.Fatalf("%d timers armed, want 1", f.Timers())
	}
	if !a.Stop() || a.Stop() {
		t.Fatal("Stop must report true once, then false")
	}
	f.Advance(time.Hour)
	select {
	case <-a.C():
		t.Fatal("stopped timer fired")
	default:
	}
	a.Reset(time.Second)
	f.Advance(time.Second)
	<-a.C()
	if !f.Now().Equal(start.Add(time.Hour + 2*time.Second)) {
		t.Fatalf("Now = %v", f.Now())
	}
}

func TestWaitForTimers(t *testing.T) {
	f := clocktest.NewFake(time.Unix(0, 0))
	if f.WaitForTimers(1, 20*time.Millisecond) {
		t.Fatal("reported a timer that does not exist")
	}
	go func() {
		time.Sleep(10 * time.Millisecond)
		f.NewTimer(time.Second)
	}()
	if !f.WaitForTimers(1, 5*time.Second) {
		t.Fatal("did not see the new timer")
	}
}

func TestOffsetShiftsWallClockNotDurations(t *testing.T) {
	f := clocktest.NewFake(time.Unix(1000, 0))
	o := clock.WithOffset(f, time.Hour)
	t0 := o.Now()
	if !t0.Equal(time.Unix(1000, 0).Add(time.Hour)) {
		t.Fatalf("offset clock reads %v", t0)
	}
	f.Advance(time.Second)
	if d := o.Now().Sub(t0); d != time.Second {
		t.Fatalf("duration %v through the offset clock", d)
	}
	real := clock.WithOffset(clock.Real(), -time.Hour)
	r0 := real.Now()
	time.Sleep(time.Millisecond)
	if d := real.Now().Sub(r0); d <= 0 || d > time.Second {
		t.Fatalf("monotonic duration through an offset real clock: %v", d)
	}
}
