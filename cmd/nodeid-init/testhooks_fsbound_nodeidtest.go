//go:build nodeidtest

package main

import (
	"os"
	"time"
)

func init() {
	// Keep the process up for a moment after a file-system hang turned
	// health unhealthy, so a test sees the 503 before the exit.
	if d, err := time.ParseDuration(os.Getenv("NODEID_TEST_HANG_EXIT_PAUSE")); err == nil && d > 0 && d < hangExitGrace {
		hangExitPause = d
	}
}
