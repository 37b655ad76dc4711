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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nodeid/nodeid/clock"
)

// States of a lease as published in the file.
const (
	StateHeld     = "held"
	StateLost     = "lost"
	StateReleased = "released"
	// StateWaiting: the supervisor is still waiting for a node ID (a hot
	// spare). Not valid for writes: there is no node ID yet. It stands only
	// until ValidUntilBoottimeNs, which the supervisor pushes forward at
	// every poll: a waiting file whose writer died goes stale by itself.
	StateWaiting = "waiting"
	// StateStopped: the supervisor stopped before it acquired a node ID.
	StateStopped = "stopped"
)

// Lease is the content of the file.
type Lease struct {
	State   string `json:"state"`
	NodeID  int    `json:"nodeId"`
	Version int64  `json:"version"` // the fencing token
	TaskID  string `json:"taskId"`
	// ValidUntilBoottimeNs is the holder's self-fence deadline as a
	// CLOCK_BOOTTIME reading in nanoseconds when held; when waiting, the
	// time until which the waiting state stands (refreshed at each poll);
	// 0 otherwise.
	ValidUntilBoottimeNs int64 `json:"validUntilBoottimeNs"`
	// BootID is the writer's /proc/sys/kernel/random/boot_id: a deadline on
	// CLOCK_BOOTTIME means nothing after a reboot (the clock restarts at
	// 0), so a file of another boot is never valid. Empty in files of older writers: then never valid where this host's
	// boot ID can be read.
	BootID string `json:"bootId,omitempty"`
}

// BootID returns this host's boot ID, or "" if it cannot be read.
func BootID() string { return bootID() }

var bootID = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
})

// ThisBoot reports whether the file was written since this host's last
// boot. A file without a boot ID (an older writer's) may be from before a
// reboot, when its CLOCK_BOOTTIME deadline means nothing: it is taken to be
// of this boot only where this host's boot ID cannot be read either.
func (l Lease) ThisBoot() bool {
	return l.BootID == bootID()
}

// Valid reports whether the lease is held, was written during this boot and
// its deadline has not passed on this host's monotonic clock.
func (l Lease) Valid() bool {
	return l.State == StateHeld && l.ThisBoot() && int64(clock.SystemBoottime()) < l.ValidUntilBoottimeNs
}

// Waiting reports whether the file says its writer is waiting for a node ID
// and that statement has not gone stale (its writer refreshes it at each
// poll; one that stopped or died does not).
func (l Lease) Waiting() bool {
	return l.State == StateWaiting && l.ThisBoot() && int64(clock.SystemBoottime()) < l.ValidUntilBoottimeNs
}

// Remaining returns how long the lease stays valid, or 0.
func (l Lease) Remaining() time.Duration {
	if l.State != StateHeld || !l.ThisBoot() {
		return 0
	}
	return max(time.Duration(l.ValidUntilBoottimeNs)-clock.SystemBoottime(), 0)
}

// Write replaces the file atomically (write to a temporary file, then
// rename), so a reader never sees half a file. It does not fsync: the file
// is rewritten at every renewal, and after a crash of the host its
// deadline means nothing anyway (see BootID).
func Write(path string, l Lease) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	if err := replace(path, ".lease-*", append(b, '\n'), 0o644, false); err != nil {
		return fmt.Errorf("lease file: %w", err)
	}
	return nil
}

// WriteFile replaces path atomically with data and mode, as Write does, and
// syncs the data to disk before the rename: for the other files a
// supervisor writes (the env file, the hand-off, the peers file, rendered
// templates). The temporary file is .NAME.* beside path.
func WriteFile(path string, data []byte, mode os.FileMode) error {
	return replace(path, "."+filepath.Base(path)+".*", data, mode, true)
}

// replace writes data to a temporary file named by pattern (as
// os.CreateTemp) in path's directory, gives it mode, fsyncs it if durable,
// and renames it over path.
func replace(path, pattern string, data []byte, mode os.FileMode, durable bool) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), pattern)
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if durable {
		if err := tmp.Sync(); err != nil {
			tmp.Close()
			return err
		}
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
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

// Check reads the file and returns nil only if the lease is valid now and
// is the reader's own: when NODE_ID or NODE_VERSION is set in the
// environment (nodeid-init run sets both for the command it starts; the
// env file of acquire does too), the file's nodeId and version must equal
// them. So a process left over from an earlier tenure, which reads a file
// its successor now writes, stops. Use CheckInstance to pass them
// explicitly.
func Check(path string) (Lease, error) {
	l, err := Read(path)
	if err != nil {
		return l, err
	}
	if err := l.validErr(); err != nil {
		return l, err
	}
	return l, l.MatchesEnv()
}

// CheckInstance is Check for the tenure of node nodeID at version version,
// whatever the environment says.
func CheckInstance(path string, nodeID int, version int64) (Lease, error) {
	l, err := Read(path)
	if err != nil {
		return l, err
	}
	if err := l.validErr(); err != nil {
		return l, err
	}
	if l.NodeID != nodeID || l.Version != version {
		return l, mismatch(l, strconv.Itoa(nodeID), strconv.FormatInt(version, 10))
	}
	return l, nil
}

func (l Lease) validErr() error {
	if !l.ThisBoot() {
		return fmt.Errorf("lease of node %d v%d was written before this host's last boot and is not valid", l.NodeID, l.Version)
	}
	if !l.Valid() {
		return fmt.Errorf("lease of node %d v%d is %s and not valid", l.NodeID, l.Version, l.State)
	}
	return nil
}

// MatchesEnv returns an error when NODE_ID or NODE_VERSION is set in the
// environment and differs from the file's nodeId or version: the file is
// then another tenure's (or says waiting), not the reader's.
func (l Lease) MatchesEnv() error {
	id, v := strings.TrimSpace(os.Getenv("NODE_ID")), strings.TrimSpace(os.Getenv("NODE_VERSION"))
	if (id != "" && id != strconv.Itoa(l.NodeID)) || (v != "" && v != strconv.FormatInt(l.Version, 10)) {
		return mismatch(l, id, v)
	}
	return nil
}

func mismatch(l Lease, id, v string) error {
	return fmt.Errorf("lease file is node %d v%d (%s), not this process's node %s v%s: not valid", l.NodeID, l.Version, l.State, orAny(id), orAny(v))
}

func orAny(s string) string {
	if s == "" {
		return "(any)"
	}
	return s
}
