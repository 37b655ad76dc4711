//go:build unix

package datadir

import (
	"os"
	"path"
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// testHookBeforeLink runs after a file was judged linkable and before it is
// linked: a test's stale holder changes it in that window, which only
// validation's nlink and SettleTime checks can see.
var testHookBeforeLink func(rel string)

// link hard-links the open source file fd (O_PATH, a regular file) into
// the target as name: that very inode, whatever its source name is now
// (linkat AT_EMPTY_PATH, or /proc/self/fd where that is not permitted).
// It records what it made for validation: the inode and, after an
// ungraceful takeover, its stamp right after the link: a stale holder's
// write after that point can set the mtime back, not the ctime. (After a
// graceful one nobody writes it, and linking every name of a multi-name
// file would move its ctime anyway.)
func (t *tree) link(fd int, st *unix.Stat_t, dst *os.File, name, rel string) error {
	if testHookBeforeLink != nil {
		testHookBeforeLink(rel)
	}
	if err := linkFd(fd, int(dst.Fd()), name); err != nil {
		return &os.LinkError{Op: "linkat", Old: path.Join(t.src, rel), New: path.Join(t.dst, rel), Err: err}
	}
	m := made{act: actLink, typ: unix.S_IFREG, dev: st.Dev, ino: st.Ino}
	if !t.cfg.graceful {
		var now unix.Stat_t
		if err := unix.Fstat(fd, &now); err != nil {
			return &os.PathError{Op: "fstat", Path: path.Join(t.src, rel), Err: err}
		}
		m.stamp = stampOf(&now)
	}
	t.record(rel, m)
	// Its bytes are counted by validation, which stats it anyway.
	t.filesLinked.Add(1)
	return nil
}

// fstatCached fills the type, device and inode number of st from fd's
// attributes as the kernel has them, without asking a network file
// system's server (statx AT_STATX_DONT_SYNC): those never change.
func fstatCached(fd int, st *unix.Stat_t) error {
	var sx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, unix.STATX_TYPE|unix.STATX_INO, &sx); err != nil {
		return err
	}
	*st = unix.Stat_t{Dev: unix.Mkdev(sx.Dev_major, sx.Dev_minor), Ino: sx.Ino, Mode: uint32(sx.Mode)}
	return nil
}

// noEmptyPathLink is set once linkat AT_EMPTY_PATH was refused (it needs
// CAP_DAC_READ_SEARCH before Linux 6.10).
var noEmptyPathLink atomic.Bool

// linkFd makes name in dirfd a hard link of the inode open as fd.
func linkFd(fd, dirfd int, name string) error {
	if !noEmptyPathLink.Load() {
		err := unix.Linkat(fd, "", dirfd, name, unix.AT_EMPTY_PATH)
		if err != unix.EPERM {
			return err
		}
		noEmptyPathLink.Store(true)
	}
	return unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), dirfd, name, unix.AT_SYMLINK_FOLLOW)
}
