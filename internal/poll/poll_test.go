package poll_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/poll"
)

func TestUntilHolds(t *testing.T) {
	n := 0
	err := poll.Until(t.Context(), time.Second, time.Millisecond, "three calls", func() bool { n++; return n == 3 })
	if err != nil || n != 3 {
		t.Fatalf("err %v after %d calls, want nil after 3", err, n)
	}
}

func TestUntilTimesOut(t *testing.T) {
	start := time.Now()
	err := poll.Until(t.Context(), 30*time.Millisecond, 5*time.Millisecond, "never", func() bool { return false })
	if err == nil || !strings.Contains(err.Error(), "timed out after 30ms waiting for never") {
		t.Fatalf("err %v, want a timeout naming what", err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("gave up after %v, before the timeout", d)
	}
}

func TestUntilStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	// No timeout of its own: only ctx ends the wait.
	err := poll.Until(ctx, 0, 5*time.Millisecond, "never", func() bool { return false })
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "waiting for never") {
		t.Fatalf("err %v, want the context's error, naming what", err)
	}
}
