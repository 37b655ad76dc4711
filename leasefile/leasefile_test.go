package leasefile_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodeid/nodeid/clock"
	"github.com/nodeid/nodeid/leasefile"
)

func TestValidityFollowsTheMonotonicDeadline(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lease.json")
	if _, err := leasefile.Read(path); !errors.Is(err, leasefile.ErrNoLease) {
		t.Fatalf("missing file: %v", err)
	}
	// An hour: valid however slow the machine is between Write and Check.
	l := leasefile.Lease{State: leasefile.StateHeld, NodeID: 2, Version: 3, TaskID: "t",
		ValidUntilBoottimeNs: int64(clock.SystemBoottime() + time.Hour)}
	if err := leasefile.Write(path, l); err != nil {
		t.Fatal(err)
	}
	got, err := leasefile.Check(path)
	if err != nil || got != l {
		t.Fatalf("check: %+v %v", got, err)
	}
	if r := got.Remaining(); r <= 0 || r > time.Hour {
		t.Fatalf("remaining %v", r)
	}
	// A deadline just ahead: invalid once CLOCK_BOOTTIME has passed it
	// (waited for on that clock, not by a sleep that load can outlast).
	deadline := clock.SystemBoottime() + 50*time.Millisecond
	l.ValidUntilBoottimeNs = int64(deadline)
	if err := leasefile.Write(path, l); err != nil {
		t.Fatal(err)
	}
	for clock.SystemBoottime() <= deadline {
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := leasefile.Check(path); err == nil {
		t.Fatal("valid after its deadline")
	}
	l.State, l.ValidUntilBoottimeNs = leasefile.StateLost, int64(clock.SystemBoottime()+time.Hour)
	if err := leasefile.Write(path, l); err != nil {
		t.Fatal(err)
	}
	if _, err := leasefile.Check(path); err == nil {
		t.Fatal("a lost lease is valid")
	}
}
