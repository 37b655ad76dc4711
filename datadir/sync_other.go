//go:build unix && !linux

package datadir

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncTree makes everything written below the directory d durable by
// fsyncing every file and directory, the portable equivalent of syncfs(2).
// It opens nothing through a symlink.
func syncTree(d *os.File) error {
	names, err := readDirNames(d)
	if err != nil {
		return err
	}
	for _, n := range names {
		var st unix.Stat_t
		if err := fstatat(int(d.Fd()), n, &st); err != nil {
			return err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			sub, err := openDirAt(d, n)
			if err != nil {
				return err
			}
			err = syncTree(sub)
			sub.Close()
			if err != nil {
				return err
			}
		case unix.S_IFREG:
			fd, err := unix.Openat(int(d.Fd()), n, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return &os.PathError{Op: "openat", Path: n, Err: err}
			}
			err = unix.Fsync(fd)
			unix.Close(fd)
			if err != nil {
				return &os.PathError{Op: "fsync", Path: n, Err: err}
			}
		}
	}
	return syncFile(d)
}
