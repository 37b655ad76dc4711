package clock

import (
	"time"

	"golang.org/x/sys/unix"
)

// SystemBoottime returns the system-wide CLOCK_BOOTTIME reading. Unlike a
// time.Time's monotonic reading, which is private to one process, it is the
// same clock for every process on the host (and for every container of an
// ECS task), so one process can publish a deadline on it and another can
// check it. It never jumps with the wall clock and, unlike CLOCK_MONOTONIC,
// keeps counting while the machine is suspended: a deadline published before
// a suspend has passed after it, as it has for every other task.
func SystemBoottime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		// CLOCK_BOOTTIME exists on every supported kernel (Linux >= 2.6.39).
		panic("clock: CLOCK_BOOTTIME unavailable: " + err.Error())
	}
	return time.Duration(ts.Nano())
}
