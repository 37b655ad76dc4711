//go:build unix

package datadir

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Everything under the data root may have been planted by another task with
// our uid. Files are therefore written only through descriptors of
// directories we hold open, and never through an entry that already exists.

// createFile creates name in dir, writes b, and fsyncs the file and dir.
// O_EXCL|O_NOFOLLOW makes any existing entry an error: a planted symlink or
// hard link is never written through.
func createFile(dir *os.File, name string, b []byte) (err error) {
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(markerMode))
	if err != nil {
		return &os.PathError{Op: "create", Path: path.Join(dir.Name(), name), Err: err}
	}
	f := os.NewFile(uintptr(fd), path.Join(dir.Name(), name))
	defer func() {
		if err != nil {
			// Written or flushed only in part: a marker must not vouch
			// for anything then. Ours only: still the inode we created.
			var st, ours unix.Stat_t
			if unix.Fstat(fd, &ours) == nil && fstatat(int(dir.Fd()), name, &st) == nil &&
				st.Dev == ours.Dev && st.Ino == ours.Ino {
				_ = unlinkAt(dir, name)
			}
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err := f.Write(b); err != nil {
		return err
	}
	if err := syncFile(f); err != nil {
		return err
	}
	return syncFile(dir)
}

// replaceFile unlinks name, which unlink(2) does without following a
// symlink, and creates it anew.
func replaceFile(dir *os.File, name string, b []byte) error {
	if err := unlinkAt(dir, name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return createFile(dir, name, b)
}

// unlinkAt removes the non-directory name from dir.
func unlinkAt(dir *os.File, name string) error {
	if err := unix.Unlinkat(int(dir.Fd()), name, 0); err != nil {
		return &os.PathError{Op: "unlinkat", Path: path.Join(dir.Name(), name), Err: err}
	}
	return nil
}

// openDirAt opens the directory name in dir without following a symlink.
// Anything that is not a directory, a symlink included, is ENOTDIR or ELOOP.
func openDirAt(dir *os.File, name string) (*os.File, error) {
	return openDirAtFlags(dir, name, 0)
}

// openDirAtFlags is openDirAt with the open(2) flags extra added.
func openDirAtFlags(dir *os.File, name string, extra int) (*os.File, error) {
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|extra, 0)
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: path.Join(dir.Name(), name), Err: err}
	}
	return os.NewFile(uintptr(fd), path.Join(dir.Name(), name)), nil
}

// errNotFresh reports that the directory makeDir opened is not empty.
var errNotFresh = errors.New("not the empty directory just created")

// makeDir creates the directory name in dir with mode (applied with
// fchmod: mkdir is subject to the umask) and opens it. The open is by name,
// so between the two the directory may have been removed and the name made
// again by someone else (there is no mkdir that returns a descriptor, and
// NFS has no RENAME_NOREPLACE to build one): with fresh, what was opened
// must be empty, or it is errNotFresh and left untouched.
func makeDir(dir *os.File, name string, mode fs.FileMode, fresh bool) (*os.File, error) {
	if err := unix.Mkdirat(int(dir.Fd()), name, uint32(mode.Perm())); err != nil {
		return nil, &os.PathError{Op: "mkdirat", Path: path.Join(dir.Name(), name), Err: err}
	}
	d, err := openDirAt(dir, name)
	if err != nil {
		return nil, err
	}
	// Nor a mount that arrived over the name since mkdirat.
	pm, err := mountOf(int(dir.Fd()), "")
	if err == nil {
		err = checkNotMount(d, "", pm)
	}
	if err != nil {
		d.Close()
		return nil, err
	}
	if fresh {
		switch empty, err := isEmpty(d); {
		case err != nil:
			d.Close()
			return nil, err
		case !empty:
			d.Close()
			return nil, fmt.Errorf("%s: %w", d.Name(), errNotFresh)
		}
	}
	if err := d.Chmod(mode); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// openRootAt opens name in root as an os.Root and checks that it is the
// directory want, which was opened without following a symlink: os.Root
// itself follows symlinks that stay inside root.
func openRootAt(root *os.Root, name string, want *os.File) (*os.Root, error) {
	r, err := root.OpenRoot(name)
	if err != nil {
		return nil, err
	}
	got, err := r.Stat(".")
	if err == nil {
		var w fs.FileInfo
		if w, err = want.Stat(); err == nil && !os.SameFile(got, w) {
			err = fmt.Errorf("%s was replaced while it was being opened", want.Name())
		}
	}
	if err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// readDirNames lists dir from its start, whatever has been read from dir.
func readDirNames(dir *os.File) ([]string, error) {
	return readDirNamesFlags(dir, 0)
}

// readDirNamesFlags is readDirNames, reopening dir with the open(2) flags
// extra added (O_NOATIME: see openKeepingAtime).
func readDirNamesFlags(dir *os.File, extra int) ([]string, error) {
	d, err := openDirAtFlags(dir, ".", extra)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Readdirnames(-1)
}

// isEmpty reports whether the directory dir has no entries: removing it
// cannot lose anything.
func isEmpty(dir *os.File) (bool, error) {
	d, err := openDirAt(dir, ".")
	if err != nil {
		return false, fmt.Errorf("datadir: %w", err)
	}
	defer d.Close()
	switch _, err := d.Readdirnames(1); {
	case err == io.EOF:
		return true, nil
	case err != nil:
		return false, fmt.Errorf("datadir: %w", err)
	}
	return false, nil
}

// readSmallFileAt reads the regular file name in dir, of at most
// maxMarkerSize bytes. A missing file is fs.ErrNotExist; a symlink, a file
// that is not regular or one too large is errBadFile. O_NONBLOCK keeps a
// planted FIFO from blocking the open.
func readSmallFileAt(dir *os.File, name string) ([]byte, error) {
	fd, err := unix.Openat(int(dir.Fd()), name, openFileFlags, 0)
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, fmt.Errorf("%s is a symlink: %w", name, errBadFile)
	case err != nil:
		return nil, &os.PathError{Op: "openat", Path: path.Join(dir.Name(), name), Err: err}
	}
	f := os.NewFile(uintptr(fd), path.Join(dir.Name(), name))
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w", name, errBadFile)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxMarkerSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if len(b) > maxMarkerSize {
		return nil, fmt.Errorf("%s is too large: %w", name, errBadFile)
	}
	return b, nil
}

// removeAllAt removes name from dir and, if it is a directory, everything
// below it, through descriptors and without following a symlink: what is
// removed is below dir, whatever is renamed or swapped meanwhile. The walk
// keeps the directories of its first heldLevels levels open; deeper, only
// the one being emptied, and an ancestor is opened again (reopenRemoval)
// when its turn comes back: descriptors do not grow with the depth.
//
// Before it opens a directory to empty it, and again right before it
// removes that directory once emptied (rmdir), it checks that each level
// above still leads to the next (fstatat of the name in its parent, as far
// up as descriptors are held, and guard, if not nil, for dir itself): a
// directory moved or replaced since it was opened, out of the data root
// perhaps, is left as it is (errMovedOut). See docs/datadir.md, "What a
// tenant who renames our directories can cause".
func removeAllAt(dir *os.File, name string, steps *atomic.Int64) (err error) {
	return removeAllAtGuarded(dir, name, steps, nil)
}

// removeAllAtGuarded is removeAllAt with guard, which fails once dir
// itself no longer lies where it was judged.
func removeAllAtGuarded(dir *os.File, name string, steps *atomic.Int64, guard func() error) (err error) {
	stack := []*removal{{d: dir, names: []string{name}}}
	defer func() {
		for _, f := range stack[1:] {
			if f.d != nil {
				f.d.Close()
			}
		}
	}()
	for {
		top := stack[len(stack)-1]
		if len(top.names) == 0 {
			// Emptied: remove it from its parent.
			if len(stack) == 1 {
				return nil
			}
			top.d.Close()
			top.d = nil
			parent := stack[len(stack)-2]
			if parent.d == nil {
				if parent.d, err = reopenRemoval(stack[:len(stack)-1]); err != nil {
					return err
				}
			}
			// Right before the rmdir, as before the open: the name still
			// leads to the directory emptied, and its parents and dir to
			// where they were judged. Moved meanwhile (out of the data
			// root perhaps, someone else's empty directory put under the
			// name), nothing is removed.
			gone, err := removalGone(parent.d, top)
			if err == nil && !gone {
				err = checkRemovalChain(stack[:len(stack)-1], guard)
			}
			if err != nil {
				return err
			}
			stack = stack[:len(stack)-1]
			if !gone {
				if err := unix.Unlinkat(int(parent.d.Fd()), top.name, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT {
					return &os.PathError{Op: "rmdir", Path: path.Join(parent.d.Name(), top.name), Err: err}
				}
			}
			step(steps)
			continue
		}
		n := top.names[0]
		top.names = top.names[1:]
		sub, names, err := openForRemoval(top.d, n, func() error { return checkRemovalChain(stack, guard) })
		switch {
		case err != nil:
			return err
		case sub == nil: // removed, or gone
			step(steps)
			continue
		}
		id, err := idOf(sub)
		if err != nil {
			sub.Close()
			return err
		}
		if len(stack) > heldLevels {
			top.d.Close()
			top.d = nil
		}
		stack = append(stack, &removal{d: sub, name: n, id: id, names: names})
	}
}

// removal is a directory removeAllAt is emptying: its name in its
// parent, its descriptor (nil while closed), as first opened, and the
// entries still to remove.
type removal struct {
	d     *os.File
	name  string
	id    dirID
	names []string
}

// errMovedOut: a directory being removed was moved or replaced meanwhile;
// what is left of it is not touched again.
var errMovedOut = errors.New("moved or replaced while it was being removed; left in place")

// removalGone reports whether r's name in parent is gone (removed by
// someone else: nothing to rmdir); errMovedOut if it leads to another
// directory than the one emptied.
func removalGone(parent *os.File, r *removal) (bool, error) {
	var st unix.Stat_t
	switch err := fstatat(int(parent.Fd()), r.name, &st); {
	case errors.Is(err, fs.ErrNotExist):
		return true, nil
	case err != nil:
		return false, err
	case (dirID{uint64(st.Dev), uint64(st.Ino)}) != r.id:
		return false, fmt.Errorf("%s: %w", path.Join(parent.Name(), r.name), errMovedOut)
	}
	return false, nil
}

// checkRemovalChain checks that each directory of stack, from the deepest
// up to the first whose parent is not held open, is still the entry of its
// name in its parent, then guard (dir itself, stack[0]).
func checkRemovalChain(stack []*removal, guard func() error) error {
	for i := len(stack) - 1; i >= 1; i-- {
		parent := stack[i-1].d
		if parent == nil {
			break // deeper than heldLevels: reopenRemoval checks on the way up
		}
		var st unix.Stat_t
		if err := fstatat(int(parent.Fd()), stack[i].name, &st); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%s: %w", path.Join(parent.Name(), stack[i].name), errMovedOut)
			}
			return err
		}
		if (dirID{uint64(st.Dev), uint64(st.Ino)}) != stack[i].id {
			return fmt.Errorf("%s: %w", path.Join(parent.Name(), stack[i].name), errMovedOut)
		}
	}
	if guard != nil {
		return guard()
	}
	return nil
}

// openForRemoval removes name from dir if it is not a directory (sub nil),
// else, once check passed, opens it for removal (see openDirForRemoval)
// and lists it.
func openForRemoval(dir *os.File, name string, check func() error) (sub *os.File, names []string, _ error) {
	var st unix.Stat_t
	switch err := fstatat(int(dir.Fd()), name, &st); {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil, nil
	case err != nil:
		return nil, nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unlinkAt(dir, name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, nil, err
		}
		return nil, nil, nil
	}
	// Never into another file system (or a bind mount): nothing on it is
	// ours. Checked on the name before the directory is opened, and on
	// what was opened before it is made writable or read: a mount may
	// arrive between the two.
	// dir must still lie where it was judged before anything below it is
	// opened, made writable or listed.
	if err := check(); err != nil {
		return nil, nil, err
	}
	pm, err := mountOf(int(dir.Fd()), "")
	if err != nil {
		return nil, nil, err
	}
	if err := checkNotMount(dir, name, pm); err != nil {
		return nil, nil, err
	}
	sub, err = openDirForRemoval(dir, name, pm)
	if err != nil {
		return nil, nil, err
	}
	if names, err = sub.Readdirnames(-1); err != nil {
		sub.Close()
		return nil, nil, err
	}
	return sub, names, nil
}

// reopenRemoval opens the last directory of stack again, by name from the
// deepest one still open, one level at a time without following a
// symlink, each checked to be the directory first opened there: one
// swapped or moved meanwhile is an error, and nothing below it is removed.
func reopenRemoval(stack []*removal) (*os.File, error) {
	i := len(stack) - 1
	for stack[i].d == nil {
		i--
	}
	from, cur := stack[i].d, stack[i].d
	for _, f := range stack[i+1:] {
		next, err := openDirAt(cur, f.name)
		if cur != from {
			cur.Close()
		}
		if err != nil {
			return nil, err
		}
		if id, err := idOf(next); err != nil || id != f.id {
			next.Close()
			if err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("%s was replaced or moved while it was being removed; left in place", next.Name())
		}
		cur = next
	}
	return cur, nil
}

// goneAt reports whether name in parent is positively no longer the
// directory d: missing, or another inode. An error says nothing.
func goneAt(parent *os.File, name string, d *os.File) bool {
	var st, want unix.Stat_t
	if err := fstatat(int(parent.Fd()), name, &st); err != nil {
		return errors.Is(err, fs.ErrNotExist)
	}
	if unix.Fstat(int(d.Fd()), &want) != nil {
		return false
	}
	return st.Dev != want.Dev || st.Ino != want.Ino
}

// rmdirAt removes the empty directory name from parent, if it still is d:
// rmdir(2) follows no symlink and removes nothing but an empty directory.
func rmdirAt(parent *os.File, name string, d *os.File) error {
	var st, want unix.Stat_t
	if err := fstatat(int(parent.Fd()), name, &st); err != nil {
		return err
	}
	if err := unix.Fstat(int(d.Fd()), &want); err != nil {
		return &os.PathError{Op: "fstat", Path: d.Name(), Err: err}
	}
	if st.Dev != want.Dev || st.Ino != want.Ino {
		return fmt.Errorf("%s was replaced since it was inspected; left in place", path.Join(parent.Name(), name))
	}
	if err := unix.Unlinkat(int(parent.Fd()), name, unix.AT_REMOVEDIR); err != nil {
		return &os.PathError{Op: "rmdir", Path: path.Join(parent.Name(), name), Err: err}
	}
	return nil
}

// openDirForRemoval opens the directory name in dir, which is being removed
// (so positively ours), without following a symlink, and makes it
// readable, writable and searchable by its owner, so that its entries can
// be removed: a read-only directory copied from a source (or made by the
// application) would otherwise keep a version from being collected for
// good. A directory we cannot even open (mode 0) is opened with O_PATH and
// changed through /proc/self/fd, which names that inode and no other.
func openDirForRemoval(dir *os.File, name string, parent mountID) (*os.File, error) {
	d, err := openDirAt(dir, name)
	if err == nil {
		if err = checkNotMount(d, "", parent); err != nil {
			d.Close()
			return nil, err
		}
	}
	if errors.Is(err, unix.EACCES) {
		fd, perr := unix.Openat(int(dir.Fd()), name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if perr != nil {
			return nil, err
		}
		var st unix.Stat_t
		if perr = checkFdNotMount(fd, name, parent); perr != nil {
			unix.Close(fd)
			return nil, perr
		}
		if perr = unix.Fstat(fd, &st); perr == nil {
			perr = unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", fd), st.Mode&0o7777|0o700)
		}
		if perr != nil {
			unix.Close(fd)
			return nil, err
		}
		d, err = openDirAt(dir, name)
		if err == nil {
			var got unix.Stat_t
			if err = unix.Fstat(int(d.Fd()), &got); err == nil && (got.Dev != st.Dev || got.Ino != st.Ino) {
				err = fmt.Errorf("%s was replaced while it was being removed", path.Join(dir.Name(), name))
			}
			if err != nil {
				d.Close()
			}
		}
		unix.Close(fd)
		if err != nil {
			return nil, err
		}
	}
	if err != nil {
		return nil, err
	}
	if err := makeWritable(d); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// makeWritable adds u+rwx to the directory d if it lacks any of them, with
// fchmod on its descriptor. It is for directories being removed only.
func makeWritable(d *os.File) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(d.Fd()), &st); err != nil {
		return &os.PathError{Op: "fstat", Path: d.Name(), Err: err}
	}
	if st.Mode&0o700 == 0o700 {
		return nil
	}
	if err := unix.Fchmod(int(d.Fd()), st.Mode&0o7777|0o700); err != nil {
		return &os.PathError{Op: "fchmod", Path: d.Name(), Err: err}
	}
	return nil
}

func fstatat(dirfd int, name string, st *unix.Stat_t) error {
	if err := unix.Fstatat(dirfd, name, st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "fstatat", Path: name, Err: err}
	}
	return nil
}

func readlinkat(dirfd int, name string) (string, error) {
	for n := 256; ; n *= 2 {
		buf := make([]byte, n)
		m, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", &os.PathError{Op: "readlinkat", Path: name, Err: err}
		}
		if m < n {
			return string(buf[:m]), nil
		}
	}
}

// openFileFlags open a file for reading without following a symlink;
// O_NONBLOCK keeps a FIFO planted under its name from blocking the open.
const openFileFlags = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC

// openFileAtFlags opens the file name in dir for reading, without
// following a symlink, with the open(2) flags extra added.
func openFileAtFlags(dir *os.File, name string, extra int) (*os.File, error) {
	fd, err := unix.Openat(int(dir.Fd()), name, openFileFlags|extra, 0)
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: path.Join(dir.Name(), name), Err: err}
	}
	return os.NewFile(uintptr(fd), path.Join(dir.Name(), name)), nil
}

// openJudgedFileAt opens the file name in dir for reading, without
// following a symlink and with the open(2) flags extra added, if it is
// still the regular file judged as want (device and inode): else
// ErrValidation, before anything reads it.
func openJudgedFileAt(dir *os.File, name string, want *unix.Stat_t, extra int) (*os.File, error) {
	p := path.Join(dir.Name(), name)
	fd, err := unix.Openat(int(dir.Fd()), name, openFileFlags|extra, 0)
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: p, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fstat", Path: p, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Dev != want.Dev || st.Ino != want.Ino {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: %s is no longer the file validated (type %#o, inode %d; validated a regular file, inode %d)",
			ErrValidation, p, st.Mode&unix.S_IFMT, st.Ino, want.Ino)
	}
	return os.NewFile(uintptr(fd), p), nil
}
