//go:build nodeidtest

package main

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nodeid/nodeid/clock"
)

// The test switches of the binary that tests and chaos experiments build
// (go build -tags nodeidtest); the production binary ignores these
// variables.
func init() {
	testHooks.clock = func(log *slog.Logger) (clock.Clock, error) {
		off := os.Getenv("NODEID_TEST_CLOCK_OFFSET")
		if off == "" {
			return nil, nil
		}
		// Shift this task's wall clock (chaos experiment 9). The protocol
		// must not care; durations stay monotonic.
		d, err := time.ParseDuration(off)
		if err != nil {
			return nil, usagef("invalid NODEID_TEST_CLOCK_OFFSET %q: %v", off, err)
		}
		log.Warn("test setting: wall clock offset", "offset_seconds", d.Seconds())
		return clock.WithOffset(clock.Real(), d), nil
	}
	testHooks.leaseFileFault = func() error {
		if os.Getenv("NODEID_TEST_LEASE_FILE_FAIL") != "" {
			return fmt.Errorf("lease file: test failure (NODEID_TEST_LEASE_FILE_FAIL)")
		}
		return nil
	}
}
