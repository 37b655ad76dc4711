package datadir

import (
	"os"

	"golang.org/x/sys/unix"
)

// mountOf identifies the mount that the directory name in dirfd (or dirfd
// itself, for name "") lies on, as a lookup of it reaches it: a mount point
// gives the root of what is mounted there. One statx, answered from the
// kernel's cache (the device and mount never change for an inode).
func mountOf(dirfd int, name string) (mountID, error) {
	flags := unix.AT_SYMLINK_NOFOLLOW | unix.AT_STATX_DONT_SYNC
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	var sx unix.Statx_t
	if err := unix.Statx(dirfd, name, flags, unix.STATX_TYPE|unix.STATX_INO|unix.STATX_MNT_ID, &sx); err != nil {
		return mountID{}, &os.PathError{Op: "statx", Path: name, Err: err}
	}
	m := mountID{dev: unix.Mkdev(sx.Dev_major, sx.Dev_minor)}
	if sx.Mask&unix.STATX_MNT_ID != 0 {
		m.mnt = sx.Mnt_id
	}
	if sx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		m.root = sx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0
	}
	return m, nil
}
