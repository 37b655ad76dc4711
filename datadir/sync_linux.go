package datadir

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// syncTree makes everything written below dir durable. One syncfs(2) flushes
// the whole file system in one go (one journal commit on ext4, one round of
// COMMITs on NFS), which is much cheaper than an fsync per copied file; the
// directory itself is fsynced as well for file systems where syncfs does
// less.
func syncTree(d *os.File) error {
	err := bounded(d.Name(), "syncfs", func() error { return unix.Syncfs(int(d.Fd())) })
	if err != nil {
		if errors.Is(err, ErrSyncTimeout) {
			return err
		}
		return &os.PathError{Op: "syncfs", Path: d.Name(), Err: err}
	}
	return syncFile(d)
}
