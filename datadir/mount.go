//go:build unix

package datadir

import (
	"errors"
	"fmt"
	"os"
	"path"
)

// mountID is where a directory lies: its device, and its mount (0 if the
// kernel does not say); root is set for the root of a mount.
type mountID struct {
	dev, mnt uint64
	root     bool
}

// crosses reports whether child, a directory below parent's, lies on
// another mount: another file system, or a bind mount of the same one.
func (parent mountID) crosses(child mountID) bool {
	return child.root || child.dev != parent.dev ||
		(parent.mnt != 0 && child.mnt != 0 && child.mnt != parent.mnt)
}

// errMountPoint reports a directory on another mount met where this
// package removes its own garbage: what is mounted there is not ours, so
// nothing on it is removed, changed or written, and nor is the directory
// that holds it.
var errMountPoint = errors.New("another file system is mounted there; it is not ours and is left in place")

// checkNotMount fails with errMountPoint if the directory name in dir (""
// for dir itself, judged against parent) lies on another mount than dir
// (than parent).
func checkNotMount(dir *os.File, name string, parent mountID) error {
	m, err := mountOf(int(dir.Fd()), name)
	if err != nil {
		return err
	}
	if parent.crosses(m) {
		return fmt.Errorf("%s: %w", path.Join(dir.Name(), name), errMountPoint)
	}
	return nil
}

// checkFdNotMount is checkNotMount for an open descriptor fd (of name),
// judged against parent.
func checkFdNotMount(fd int, name string, parent mountID) error {
	m, err := mountOf(fd, "")
	if err != nil {
		return err
	}
	if parent.crosses(m) {
		return fmt.Errorf("%s: %w", name, errMountPoint)
	}
	return nil
}

// checkVersionNotMount fails with errMountPoint if the version directory d
// (open, in node) is a mount point or, as far as the mount table says,
// holds one: then nothing of it is removed.
func checkVersionNotMount(node, d *os.File) error {
	pm, err := mountOf(int(node.Fd()), "")
	if err != nil {
		return err
	}
	if err := checkNotMount(d, "", pm); err != nil {
		return err
	}
	if mountsBelow(d) {
		return fmt.Errorf("%s holds a mount point: %w", d.Name(), errMountPoint)
	}
	return nil
}
