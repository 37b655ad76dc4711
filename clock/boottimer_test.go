package clock

import (
	"os"
	"testing"
	"time"
)

func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(entries)
}

func TestBootTimerFiresStopsAndResets(t *testing.T) {
	c := Real()
	before := openFDs(t)
	start := c.Now()
	tm := c.NewTimer(30 * time.Millisecond)
	if _, ok := tm.(*bootTimer); !ok {
		t.Fatalf("Real's timer is %T, want a CLOCK_BOOTTIME timer", tm)
	}
	select {
	case at := <-tm.C():
		if at.Sub(start) < 30*time.Millisecond {
			t.Fatalf("fired after %v, before its 30ms", at.Sub(start))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("timer never fired")
	}

	// Stop before the deadline: nothing is delivered.
	tm.Reset(20 * time.Millisecond)
	if !tm.Stop() {
		t.Error("Stop of an armed timer reported it inactive")
	}
	select {
	case <-tm.C():
		t.Fatal("a stopped timer fired")
	case <-time.After(100 * time.Millisecond):
	}
	if tm.Stop() {
		t.Error("Stop of a stopped timer reported it active")
	}

	// Reset after Stop re-arms; a Reset to a long delay drops the earlier,
	// shorter arming.
	tm.Reset(time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	tm.Reset(time.Hour)
	select {
	case <-tm.C():
		t.Fatal("a value of the earlier arming came after Reset")
	case <-time.After(100 * time.Millisecond):
	}
	tm.Stop()
	time.Sleep(10 * time.Millisecond) // the waiting goroutine ends on Close
	if after := openFDs(t); after > before {
		t.Errorf("%d descriptors open after Stop, %d before", after, before)
	}
}
