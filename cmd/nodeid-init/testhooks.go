package main

import (
	"log/slog"

	"github.com/nodeid/nodeid/clock"
)

// testHooks is the one seam for test-only behaviour. The production binary
// leaves every field nil; a build with -tags nodeidtest sets the switches
// read from NODEID_TEST_* variables (testhooks_nodeidtest.go), and tests of
// this package set beforeStart.
var testHooks hooks

type hooks struct {
	// clock, if set, returns the clock the provider runs on, or nil for the
	// default one.
	clock func(log *slog.Logger) (clock.Clock, error)
	// leaseFileFault, if set, returns the error a lease-file write fails
	// with, or nil to write.
	leaseFileFault func() error
	// beforeStart, if set, runs just before run decides to start the
	// command (tests deliver a signal there).
	beforeStart func()
}
