package datadir

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/nodeid/nodeid/node"
)

// Dir returns the directory of inst under root: <root>/node-<ID>/v<Version>.
func Dir(root string, inst node.Instance) string {
	return filepath.Join(root, nodeDirName(inst.ID), versionDirName(inst.Version))
}

func nodeDirName(id int) string            { return "node-" + strconv.Itoa(id) }
func versionDirName(v node.Version) string { return "v" + strconv.FormatInt(int64(v), 10) }

// parseVersionDirName accepts only the canonical form written by
// versionDirName ("v7", not "v07"), so one version has one directory.
func parseVersionDirName(name string) (node.Version, bool) {
	if len(name) < 2 || name[0] != 'v' || (len(name) > 2 && name[1] == '0') {
		return 0, false
	}
	for _, c := range name[1:] {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(name[1:], 10, 64)
	if err != nil {
		return 0, false
	}
	return node.Version(v), true
}

// openRoot checks root up front so that a misconfigured mount gives one clear
// error instead of a failure somewhere inside the copy. Only a caller that
// writes asks for a writable root.
func openRoot(root string, writable bool) (*os.Root, error) {
	if root == "" {
		return nil, fmt.Errorf("%w: empty path", ErrRoot)
	}
	fi, err := os.Stat(root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%w: %s does not exist", ErrRoot, root)
	case err != nil:
		return nil, fmt.Errorf("%w: %w", ErrRoot, err)
	case !fi.IsDir():
		return nil, fmt.Errorf("%w: %s is not a directory", ErrRoot, root)
	}
	if writable {
		if err := checkWritable(root); err != nil {
			return nil, fmt.Errorf("%w: %s is not writable: %w", ErrRoot, root, err)
		}
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRoot, err)
	}
	return r, nil
}

// nodeDir is <root>/node-N, opened once without following a symlink: f for
// the *at system calls, r (the same directory) for the copy. root is
// <root>, where name must still lead to f (id) for anything to be written
// or removed through f (moved).
type nodeDir struct {
	f    *os.File
	r    *os.Root
	root *os.File
	name string
	id   dirID
}

func (n *nodeDir) Close() {
	n.f.Close()
	n.r.Close()
	n.root.Close()
}

// moved reports whether node-N's name in the data root no longer leads
// to the directory opened (gone, or another inode): f follows node-N
// wherever a tenant renames it, out of the data root included. An error
// says nothing. One fstatat.
func (n *nodeDir) moved() (bool, error) {
	var st unix.Stat_t
	switch err := fstatat(int(n.root.Fd()), n.name, &st); {
	case errors.Is(err, fs.ErrNotExist):
		return true, nil
	case err != nil:
		return false, err
	default:
		return (dirID{uint64(st.Dev), uint64(st.Ino)}) != n.id, nil
	}
}

// openNodeDir opens <root>/node-N. A symlink in its place is refused: it
// could point anywhere.
func openNodeDir(root *os.Root, name string, mode fs.FileMode, create bool) (*nodeDir, error) {
	rf, err := root.Open(".")
	if err != nil {
		return nil, fmt.Errorf("datadir: %w", err)
	}
	keep := false
	defer func() {
		if !keep {
			rf.Close()
		}
	}()
	var f *os.File
	if create {
		f, err = makeDir(rf, name, mode, false)
		if errors.Is(err, fs.ErrExist) {
			err = nil
		}
	}
	if f == nil && err == nil {
		f, err = openDirAt(rf, name)
	}
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		// Linux reports a symlink opened with O_DIRECTORY|O_NOFOLLOW as
		// either.
		var st unix.Stat_t
		if fstatat(int(rf.Fd()), name, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return nil, fmt.Errorf("%w: %s is a symlink", ErrUnsafeSymlink, name)
		}
		return nil, fmt.Errorf("datadir: %s is not a directory", name)
	case err != nil:
		return nil, fmt.Errorf("datadir: %w", err)
	}
	id, err := idOf(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("datadir: %w", err)
	}
	r, err := openRootAt(root, name, f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("datadir: %w", err)
	}
	keep = true
	return &nodeDir{f: f, r: r, root: rf, name: name, id: id}, nil
}

// versionDirs lists the version directories of node in descending order.
func versionDirs(nodeDir *os.File) ([]node.Version, error) {
	names, err := readDirNames(nodeDir)
	if err != nil {
		return nil, fmt.Errorf("datadir: listing versions: %w", err)
	}
	var vs []node.Version
	for _, n := range names {
		if v, ok := parseVersionDirName(n); ok {
			vs = append(vs, v)
		}
	}
	// Descending: the newest first.
	slices.SortFunc(vs, func(a, b node.Version) int { return cmp.Compare(b, a) })
	return vs, nil
}
