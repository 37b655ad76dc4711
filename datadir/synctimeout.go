package datadir

import (
	"errors"
	"fmt"
	"os"
	"time"
)

// ErrSyncTimeout reports an fsync or syncfs that did not return within
// SyncTimeout: the file system (an NFS server, EFS) stopped completing
// writes. Nothing after it can be trusted to be durable, so the preparation
// fails; its target is left for the next attempt, which redoes it.
var ErrSyncTimeout = errors.New("datadir: the file system did not complete a flush in time")

// SyncTimeout bounds each fsync and syncfs of Prepare and Collect. A
// healthy EFS completes one in milliseconds, and a syncfs of gigabytes in
// seconds; a hung server never does, and without a bound the task would
// wait forever instead of failing and being restarted.
var SyncTimeout = 2 * time.Minute

// syncFile fsyncs f within SyncTimeout.
func syncFile(f *os.File) error { return bounded(f.Name(), "fsync", f.Sync) }

// bounded runs the flush op on a goroutine and waits for it at most
// SyncTimeout. A flush that hangs is left behind: the kernel lets no
// process interrupt it short of SIGKILL (NFS hard mounts, FUSE), and the
// goroutine ends when the file system answers or the process exits.
func bounded(name, op string, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	timer := time.NewTimer(SyncTimeout)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		return fmt.Errorf("%w: %s of %s did not return within %v", ErrSyncTimeout, op, name, SyncTimeout)
	}
}
