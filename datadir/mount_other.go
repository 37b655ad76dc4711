//go:build !linux

package datadir

import (
	"os"

	"golang.org/x/sys/unix"
)

// mountOf identifies the device that the directory name in dirfd (or dirfd
// itself, for name "") lies on; without statx there is no mount ID.
func mountOf(dirfd int, name string) (mountID, error) {
	var st unix.Stat_t
	var err error
	if name == "" {
		err = unix.Fstat(dirfd, &st)
	} else {
		err = unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err != nil {
		return mountID{}, &os.PathError{Op: "stat", Path: name, Err: err}
	}
	return mountID{dev: uint64(st.Dev)}, nil
}

// mountsBelow is false without /proc/self/mountinfo: the check of each
// directory still stops a removal at a mount.
func mountsBelow(*os.File) bool { return false }
