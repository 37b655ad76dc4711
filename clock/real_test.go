package clock

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Real's readings advance with CLOCK_BOOTTIME and carry no Go monotonic
// reading (which would make Sub use CLOCK_MONOTONIC, stopped in a suspend).
func TestRealNowFollowsBoottime(t *testing.T) {
	c := Real()
	b0, n0 := SystemBoottime(), c.Now()
	time.Sleep(20 * time.Millisecond)
	n1, b1 := c.Now(), SystemBoottime()
	if strings.Contains(n0.String(), "m=") {
		t.Fatalf("Now %v carries Go's monotonic reading", n0)
	}
	// n1-n0 was measured inside b1-b0.
	if d := n1.Sub(n0); d < 20*time.Millisecond || d > b1-b0 {
		t.Fatalf("clock advanced %v, boottime %v around it", d, b1-b0)
	}
	if off := WithOffset(c, time.Hour).Now().Sub(c.Now()); off < time.Hour-time.Second || off > time.Hour {
		t.Fatalf("WithOffset shifted by %v, want 1h", off)
	}
}

// lowFDLimit lets the process open no more descriptors until the returned
// function restores the limit.
func lowFDLimit(t *testing.T) func() {
	t.Helper()
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Skip(err)
	}
	// The lowest free descriptor is the next one the kernel hands out; a
	// limit at it refuses every new one.
	fd, err := unix.Dup(0)
	if err != nil {
		t.Skip(err)
	}
	unix.Close(fd)
	low := old
	low.Cur = uint64(fd)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Skip(err)
	}
	return func() {
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
			t.Fatal(err)
		}
	}
}

// Out of descriptors: a new timer falls back to a Go timer that still
// works, and a boot timer whose Reset cannot open a timerfd fires at once
// (a watchdog that cannot wait must not stay silent).
func TestRealTimersWithoutDescriptors(t *testing.T) {
	c := Real()
	bt := c.NewTimer(time.Hour)
	if _, ok := bt.(*bootTimer); !ok {
		t.Fatalf("timer is %T, want a boot timer", bt)
	}
	bt.Stop() // closes its timerfd: the next Reset needs a new one

	restore := lowFDLimit(t)
	tm := c.NewTimer(10 * time.Millisecond)
	bt.Reset(time.Hour)
	restore()

	rt, ok := tm.(*realTimer)
	if !ok {
		t.Fatalf("without descriptors the timer is %T, want the Go fallback", tm)
	}
	select {
	case <-bt.C():
	case <-time.After(time.Second):
		t.Fatal("a Reset that could not arm did not fire at once")
	}
	select {
	case <-rt.C():
	case <-time.After(5 * time.Second):
		t.Fatal("the fallback timer never fired")
	}
	rt.Reset(time.Hour)
	if !rt.Stop() {
		t.Error("Stop of the re-armed fallback timer reported it inactive")
	}
	select {
	case <-rt.C():
		t.Fatal("a stopped fallback timer fired")
	case <-time.After(50 * time.Millisecond):
	}
}
