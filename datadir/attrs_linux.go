package datadir

import (
	"errors"
	"fmt"
	"os"
	"path"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Owners, modes and times of the copies, as cp -a keeps them, set through
// the descriptor of the entry made: a name in the target may have been
// swapped meanwhile (for a hard link to someone else's file), a
// descriptor cannot be.

// keepOwner gives the new entry fd (dst: its fstat) the owner and group of
// its source src, as cp -a does: as root it can, otherwise only the group
// of a member (chown(2) refuses the rest, EPERM; so does root on a file
// system that squashes it). A refusal is not an error: the copy then
// belongs to the preparing user, and keepOwner reports that the owner was
// not kept (the caller drops setuid and setgid) and counts it. emptyPath:
// fd is an O_PATH descriptor (a symlink), changed with AT_EMPTY_PATH.
func (t *tree) keepOwner(fd int, emptyPath bool, src, dst *unix.Stat_t, rel string) (bool, error) {
	if src.Uid == dst.Uid && src.Gid == dst.Gid {
		return true, nil
	}
	chown := func(uid, gid int) error {
		if emptyPath {
			return unix.Fchownat(fd, "", uid, gid, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW)
		}
		return unix.Fchown(fd, uid, gid)
	}
	err := chown(int(src.Uid), int(src.Gid))
	switch {
	case err == nil:
		return true, nil
	case err != unix.EPERM && err != unix.EINVAL:
		return false, &os.PathError{Op: "fchown", Path: path.Join(t.dst, rel), Err: err}
	}
	// As cp does: at least the group, where we are a member of it.
	gid := dst.Gid
	if src.Gid != gid && chown(-1, int(src.Gid)) == nil {
		gid = src.Gid
	}
	t.ownersLost.Add(1)
	return src.Uid == dst.Uid && src.Gid == gid, nil
}

// copyMode is the mode a copy of the source st gets: the source's, but
// where its owner or group could not be kept (kept false), without setuid
// and setgid (and, for a file, sticky), as chown(2) and cp -p without
// privileges drop them: a setuid program or setgid directory of another
// user must not become one of the copier's.
func copyMode(st *unix.Stat_t, kept bool) uint32 {
	mode := st.Mode & 0o7777
	if kept {
		return mode
	}
	drop := uint32(unix.S_ISUID | unix.S_ISGID)
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		drop |= unix.S_ISVTX
	}
	return mode &^ drop
}

// futimens gives the file or directory open as fd the access and
// modification times of st: utimensat(fd, NULL, ...), which changes the
// inode fd is open on, whatever its name is now.
func futimens(fd int, st *unix.Stat_t) error {
	ts := [2]unix.Timespec{st.Atim, st.Mtim}
	if _, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0); e != 0 {
		return e
	}
	return nil
}

// noEmptyPathUtimes is set once utimensat AT_EMPTY_PATH was refused
// (kernels before it was supported).
var noEmptyPathUtimes atomic.Bool

// finishDir gives the target directory d (dst: its fstat) the owner, mode
// and times of its source st, in that order: chown(2) may clear mode bits
// (cp sets the mode after the owner), and both move the ctime only.
func (t *tree) finishDir(d *os.File, dst, st *unix.Stat_t, rel string) error {
	fd := int(d.Fd())
	kept, err := t.keepOwner(fd, false, st, dst, rel)
	if err != nil {
		return err
	}
	if err := unix.Fchmod(fd, copyMode(st, kept)); err != nil {
		return &os.PathError{Op: "fchmod", Path: path.Join(t.dst, rel), Err: err}
	}
	if err := futimens(fd, st); err != nil {
		return &os.PathError{Op: "futimens", Path: path.Join(t.dst, rel), Err: err}
	}
	return nil
}

// finishTop gives the target version directory the owner of the source's;
// its mode is Prepare's (DirMode), its times are set last (keepTopTimes).
// It runs once the walk is done.
func (t *tree) finishTop(st *unix.Stat_t) error {
	fd := int(t.dstDir.Fd())
	var dst unix.Stat_t
	if err := unix.Fstat(fd, &dst); err != nil {
		return &os.PathError{Op: "fstat", Path: t.dstDir.Name(), Err: err}
	}
	if _, err := t.keepOwner(fd, false, st, &dst, "."); err != nil {
		return err
	}
	if n := t.ownersLost.Load(); n > 0 {
		t.log.Warn("owners not kept: copies belong to the preparing user, setuid and setgid dropped",
			"target", t.dst, "entries", n, "uid", os.Geteuid())
	}
	return nil
}

// keepTopTimes gives the target version directory the times of the
// source's, once nothing more is written into it or listed: the marker,
// the in-progress file's removal and the checks would otherwise move them.
func (t *tree) keepTopTimes() error {
	if err := futimens(int(t.dstDir.Fd()), &t.topStat); err != nil {
		return &os.PathError{Op: "futimens", Path: t.dstDir.Name(), Err: err}
	}
	return nil
}

// finishSymlink opens the symlink name just made in dst (O_PATH, not
// following it), checks that it still is the one made (a symlink with one
// name and target), records it, and gives it the owner and times of its
// source st. A name swapped meanwhile fails the copy instead of having
// its owner or times changed.
func (t *tree) finishSymlink(dst *os.File, name, rel, target string, st *unix.Stat_t) error {
	p := path.Join(t.dst, rel)
	fd, err := unix.Openat(int(dst.Fd()), name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "openat", Path: p, Err: err}
	}
	defer unix.Close(fd)
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil {
		return &os.PathError{Op: "fstat", Path: p, Err: err}
	}
	if now.Mode&unix.S_IFMT != unix.S_IFLNK || now.Nlink != 1 {
		return fmt.Errorf("%w: %s: replaced in the target right after it was made", ErrValidation, rel)
	}
	if got, err := readlinkat(fd, ""); err != nil || got != target {
		return fmt.Errorf("%w: %s: replaced in the target right after it was made (%v)", ErrValidation, rel, err)
	}
	t.record(rel, made{act: actSymlink, typ: unix.S_IFLNK, dev: now.Dev, ino: now.Ino})
	if _, err := t.keepOwner(fd, true, st, &now, rel); err != nil {
		return err
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if !noEmptyPathUtimes.Load() {
		err := unix.UtimesNanoAt(fd, "", ts, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW)
		if err != unix.EINVAL && err != unix.ENOENT {
			if err != nil {
				return &os.PathError{Op: "utimensat", Path: p, Err: err}
			}
			return nil
		}
		noEmptyPathUtimes.Store(true)
	}
	// Without AT_EMPTY_PATH: by name, not following a symlink. A symlink
	// has no other name to reach it by, and what is named now was checked
	// above.
	if err := unix.UtimesNanoAt(int(dst.Fd()), name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "utimensat", Path: p, Err: err}
	}
	return nil
}

// statSource stats the source entry e of dirfd for validation, without
// following a symlink. After an ungraceful takeover a regular file's
// attributes are asked of the file system itself first (statx
// AT_STATX_FORCE_SYNC, which refreshes the kernel's copy that fstatat then
// reads): an NFS client caches them for seconds (up to a minute for a file
// that looked unchanged), and a stale holder on another machine writes
// through its own client, so a cached stamp could hide its write. Local
// file systems ignore the flag. After a graceful release nobody writes the
// source, and the cache is used.
func (t *tree) statSource(dirfd int, name string, e dirEntry, st *unix.Stat_t) error {
	if !t.cfg.graceful && e.Type().IsRegular() {
		var sx unix.Statx_t
		if err := unix.Statx(dirfd, name, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_FORCE_SYNC, unix.STATX_BASIC_STATS, &sx); err != nil {
			return &os.PathError{Op: "statx", Path: name, Err: err}
		}
	}
	return fstatat(dirfd, name, st)
}

// euid is who Prepare runs as: O_NOATIME is for the inode's owner, or one
// with CAP_FOWNER (root).
var euid = uint32(os.Geteuid())

// openKeepingAtime opens name in dir (a directory with dir, else a file to
// read) with O_NOATIME where the owner uid of that entry allows it.
// Validation reads copies and lists target directories after their times
// were set; on a relatime mount (the default) that would make their access
// times the preparation's, where cp -a keeps the source's. On an inode of
// another owner the flag is not asked for (EPERM, a system call lost per
// entry); should the kernel refuse it anyway (root without CAP_FOWNER), the
// open is made without it, and the access time may move. It returns the
// flag granted, for reopening a directory to list it (readDirNamesFlags).
func openKeepingAtime(dir *os.File, name string, uid uint32, isDir bool) (*os.File, int, error) {
	open := openFileAtFlags
	if isDir {
		open = openDirAtFlags
	}
	if euid != 0 && euid != uid {
		f, err := open(dir, name, 0)
		return f, 0, err
	}
	f, err := open(dir, name, unix.O_NOATIME)
	if errors.Is(err, unix.EPERM) {
		f, err = open(dir, name, 0)
		return f, 0, err
	}
	return f, unix.O_NOATIME, err
}

// openJudgedKeepingAtime is openJudgedFileAt, asking for O_NOATIME as
// openKeepingAtime does.
func openJudgedKeepingAtime(dir *os.File, name string, want *unix.Stat_t) (*os.File, error) {
	if euid != 0 && euid != want.Uid {
		return openJudgedFileAt(dir, name, want, 0)
	}
	f, err := openJudgedFileAt(dir, name, want, unix.O_NOATIME)
	if errors.Is(err, unix.EPERM) {
		return openJudgedFileAt(dir, name, want, 0)
	}
	return f, err
}
