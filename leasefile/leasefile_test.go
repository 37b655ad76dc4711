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
	l := leasefile.Lease{State: leasefile.StateHeld, NodeID: 2, Version: 3, TaskID: "t", BootID: leasefile.BootID(),
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

// Check compares the file's tenure with NODE_ID and NODE_VERSION when they
// are set (a leftover of an earlier tenure must not take its successor's
// lease for its own); CheckInstance with the given ones.
func TestCheckComparesTheReadersTenure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lease.json")
	l := leasefile.Lease{State: leasefile.StateHeld, NodeID: 0, Version: 2, TaskID: "t", BootID: leasefile.BootID(),
		ValidUntilBoottimeNs: int64(clock.SystemBoottime() + time.Hour)}
	if err := leasefile.Write(path, l); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NODE_ID", "")
	t.Setenv("NODE_VERSION", "")
	if _, err := leasefile.Check(path); err != nil {
		t.Fatalf("without NODE_ID/NODE_VERSION: %v", err)
	}
	for _, env := range [][2]string{{"0", "1"}, {"1", "2"}, {"", "1"}, {"1", ""}} {
		t.Setenv("NODE_ID", env[0])
		t.Setenv("NODE_VERSION", env[1])
		if _, err := leasefile.Check(path); err == nil {
			t.Errorf("NODE_ID=%q NODE_VERSION=%q: node 0 v2 passed", env[0], env[1])
		}
	}
	t.Setenv("NODE_ID", "0")
	t.Setenv("NODE_VERSION", "2")
	if _, err := leasefile.Check(path); err != nil {
		t.Fatalf("own tenure: %v", err)
	}
	if _, err := leasefile.CheckInstance(path, 0, 1); err == nil {
		t.Error("CheckInstance of v1 passed on v2")
	}
	if _, err := leasefile.CheckInstance(path, 0, 2); err != nil {
		t.Errorf("CheckInstance of its own tenure: %v", err)
	}
}

// A file written during another boot is never valid: CLOCK_BOOTTIME
// restarted, so its deadline means nothing. One without a boot ID (an
// older writer) is judged by its deadline alone.
func TestAFileOfAnotherBootIsNotValid(t *testing.T) {
	if leasefile.BootID() == "" {
		t.Skip("no /proc/sys/kernel/random/boot_id")
	}
	l := leasefile.Lease{State: leasefile.StateHeld, NodeID: 1, Version: 1,
		ValidUntilBoottimeNs: int64(clock.SystemBoottime() + time.Hour), BootID: leasefile.BootID()}
	if !l.Valid() {
		t.Fatal("this boot's held lease is not valid")
	}
	l.BootID = "" // an older writer's file: it may be from before a reboot
	if l.Valid() {
		t.Fatal("a lease without a boot ID is valid")
	}
	l.BootID = "00000000-0000-0000-0000-000000000000"
	if l.Valid() || l.Remaining() != 0 {
		t.Fatal("a lease of another boot is valid")
	}
	l.State = leasefile.StateWaiting
	if l.Waiting() {
		t.Fatal("a waiting state of another boot stands")
	}
}

// The waiting state stands until its deadline only.
func TestWaitingGoesStale(t *testing.T) {
	l := leasefile.Lease{State: leasefile.StateWaiting, NodeID: -1, BootID: leasefile.BootID(),
		ValidUntilBoottimeNs: int64(clock.SystemBoottime() + 100*time.Millisecond)}
	if !l.Waiting() || l.Valid() {
		t.Fatalf("fresh waiting: Waiting %v, Valid %v", l.Waiting(), l.Valid())
	}
	time.Sleep(150 * time.Millisecond)
	if l.Waiting() {
		t.Fatal("waiting past its deadline")
	}
	l.ValidUntilBoottimeNs = 0 // an older writer's
	if l.Waiting() {
		t.Fatal("waiting without a deadline")
	}
}
