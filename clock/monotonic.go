package clock

import (
	"time"

	"golang.org/x/sys/unix"
)

// SystemMonotonic returns the system-wide CLOCK_MONOTONIC reading. Unlike a
// time.Time's monotonic reading, which is private to one process, it is the
// same clock for every process on the host (and for every container of an
// ECS task), so one process can publish a deadline on it and another can
// check it. It does not advance while the machine is suspended and never
// jumps with the wall clock.
func SystemMonotonic() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		// CLOCK_MONOTONIC exists on every supported kernel.
		panic("clock: CLOCK_MONOTONIC unavailable: " + err.Error())
	}
	return time.Duration(ts.Nano())
}
