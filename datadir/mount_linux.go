package datadir

import (
	"os"
	"strconv"
	"strings"

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

// mountTable is the mount table mountsBelow reads; tests set another.
var mountTable = "/proc/self/mountinfo"

// mountsBelow reports whether something is mounted at or below the
// directory d, from /proc/self/mountinfo, so that a version holding a
// mount is left whole rather than emptied up to it. Without /proc it
// reports false: the statx check of each directory still stops the
// removal at the mount.
func mountsBelow(d *os.File) bool {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(d.Fd())))
	if err != nil || !strings.HasPrefix(p, "/") {
		return false
	}
	b, err := os.ReadFile(mountTable)
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMountinfo(f[4])
		if mp == p || strings.HasPrefix(mp, p+"/") {
			return true
		}
	}
	return false
}

// unescapeMountinfo undoes the octal escapes (\040 for a space, ...) of a
// path in /proc/self/mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var out []byte
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				out = append(out, byte(n))
				i += 3
				continue
			}
		}
		out = append(out, s[i])
	}
	return string(out)
}
