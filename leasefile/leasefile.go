// Package leasefile is the small file through which a supervisor (nodeid-init
// run or renew) tells the process it supervises whether its lease is still
// valid, so that process can fence its own writes without asking S3: read the
// file before each write and stop if Valid is false.
//
// Deadlines are CLOCK_BOOTTIME readings, shared by every process on the host:
// a broker that was paused (SIGSTOP, a long GC) or whose machine was
// suspended sees on resume that the deadline has passed, whatever happened
// to the wall clock. (CLOCK_MONOTONIC stops during a suspend.)
package leasefile

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nodeid/nodeid/clock"
)

// States of a lease as published in the file.
const (
	StateHeld     = "held"
	StateLost     = "lost"
	StateReleased = "released"
	// StateWaiting: the supervisor is still waiting for a node ID (a hot
	// spare). Not valid for writes: there is no node ID yet.
	StateWaiting = "waiting"
)

// Lease is the content of the file.
type Lease struct {
	State   string `json:"state"`
	NodeID  int    `json:"nodeId"`
	Version int64  `json:"version"` // the fencing token
	TaskID  string `json:"taskId"`
	// ValidUntilBoottimeNs is the holder's self-fence deadline as a
	// CLOCK_BOOTTIME reading in nanoseconds; 0 when not held.
	ValidUntilBoottimeNs int64 `json:"validUntilBoottimeNs"`
}

// Valid reports whether the lease is held and its deadline has not passed on
// this host's monotonic clock.
func (l Lease) Valid() bool {
	return l.State == StateHeld && int64(clock.SystemBoottime()) < l.ValidUntilBoottimeNs
}

// Remaining returns how long the lease stays valid, or 0.
func (l Lease) Remaining() time.Duration {
	if l.State != StateHeld {
		return 0
	}
	return max(time.Duration(l.ValidUntilBoottimeNs)-clock.SystemBoottime(), 0)
}

// Write replaces the file atomically (write to a temporary file, then
// rename), so a reader never sees half a file.
func Write(path string, l Lease) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".lease-*")
	if err != nil {
		return fmt.Errorf("lease file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("lease file: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("lease file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("lease file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("lease file: %w", err)
	}
	return nil
}

// ErrNoLease is returned by Read when the file does not exist.
var ErrNoLease = errors.New("lease file: no lease published")

// Read reads the file. A missing file is ErrNoLease; an unreadable one is an
// error: either way the caller must treat the lease as not valid.
func Read(path string) (Lease, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Lease{}, ErrNoLease
	}
	if err != nil {
		return Lease{}, fmt.Errorf("lease file: %w", err)
	}
	var l Lease
	if err := json.Unmarshal(b, &l); err != nil {
		return Lease{}, fmt.Errorf("lease file %s: %w", path, err)
	}
	return l, nil
}

// Check reads the file and returns nil only if the lease is valid now.
func Check(path string) (Lease, error) {
	l, err := Read(path)
	if err != nil {
		return l, err
	}
	if !l.Valid() {
		return l, fmt.Errorf("lease of node %d v%d is %s and not valid", l.NodeID, l.Version, l.State)
	}
	return l, nil
}
