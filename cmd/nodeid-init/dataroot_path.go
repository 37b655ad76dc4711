package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxPathDepth bounds the walk up from a directory to / (underDataRoot).
const maxPathDepth = 256

// maxSymlinks bounds the symlinks followed while resolving a path outside
// the data root (underDataRoot), as the kernel's ELOOP does.
const maxSymlinks = 40

// underDataRoot tells whether dir lies under the data root, by identity
// rather than by the path's text. dir is resolved one component at a time
// from / (or the working directory): a symlink met outside the data root
// is the operator's, its text spliced into the rest of the path; after
// each directory reached, walking up from it with `..` tells whether it
// lies inside the data root (it reaches a directory with the data root's
// device and inode: through the operator's symlink to the data root or to
// a directory inside it, or a bind mount of the data root). The first
// directory inside makes dir that directory's place inside the data root
// followed by the rest of the path, which openInside then walks without
// following a symlink: a tenant's symlink inside the data root is met
// there, never followed while resolving. It returns the data root, opened
// (the caller owns it), and dir relative to it; nil when dir is not under
// it.
func underDataRoot(dir, dataRoot string) (*os.Root, string, error) {
	if dataRoot == "" {
		return nil, "", nil
	}
	root, err := os.OpenRoot(dataRoot)
	if err != nil {
		return nil, "", err
	}
	var want unix.Stat_t
	if err := unix.Stat(dataRoot, &want); err != nil {
		root.Close()
		return nil, "", fmt.Errorf("data root %s: %w", dataRoot, err)
	}
	if fi, err := root.Stat("."); err != nil || !sameStat(fi, &want) {
		root.Close()
		return nil, "", fmt.Errorf("data root %s changed while it was opened", dataRoot)
	}
	abs, err := filepath.Abs(dir) // the configured text cleaned, as before
	if err != nil {
		root.Close()
		return nil, "", err
	}
	inside, ok, err := resolveToDataRoot(abs, &want, &mountPlace{root: root, rootPath: dataRoot, want: &want})
	if err != nil || !ok {
		root.Close()
		return nil, "", err
	}
	return root, inside, nil
}

// resolveToDataRoot resolves path as underDataRoot says and returns its
// place inside the data root want; ok is false when it does not lie under
// it, or a component does not exist or is not a directory (the caller's
// open then reports it).
func resolveToDataRoot(path string, want *unix.Stat_t, mp *mountPlace) (string, bool, error) {
	start := string(filepath.Separator)
	curPath := start // cur's path, with no symlink in it
	cur, err := unix.Open(start, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", false, err
	}
	defer func() { unix.Close(cur) }()
	check := func(shown string) (string, bool, error) {
		fd, err := unix.Dup(cur)
		if err != nil {
			return "", false, err
		}
		inside, ok, err := placeInside(fd, want)
		if err != nil {
			return "", false, fmt.Errorf("%s: %w", shown, err)
		}
		if !ok {
			// `..` of a mount's root leaves the mount: a bind mount of a
			// directory inside the data root is found by its mount.
			inside, ok, err = mp.place(cur, curPath)
			if err != nil {
				return "", false, fmt.Errorf("%s: %w", shown, err)
			}
		}
		return inside, ok, nil
	}
	if inside, ok, err := check(start); err != nil || ok {
		return inside, ok, err
	}
	rest := splitPath(path)
	links := 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		if c == "" || c == "." {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(cur, c, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return "", false, nil // the rest does not exist: not reached through the data root
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			if links++; links > maxSymlinks {
				return "", false, fmt.Errorf("%s: more than %d symlinks: %w", path, maxSymlinks, unix.ELOOP)
			}
			target, err := readlinkat(cur, c)
			if err != nil {
				return "", false, fmt.Errorf("%s: %w", path, err)
			}
			if filepath.IsAbs(target) {
				fd, err := unix.Open(string(filepath.Separator), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
				if err != nil {
					return "", false, err
				}
				unix.Close(cur)
				cur, curPath = fd, string(filepath.Separator)
				if inside, ok, err := check(string(filepath.Separator)); err != nil || ok {
					return inside, ok, err
				}
			}
			rest = append(splitPath(target), rest...)
			continue
		case unix.S_IFDIR:
		default:
			return "", false, nil // not a directory: the caller's open reports it
		}
		fd, err := unix.Openat(cur, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", false, fmt.Errorf("%s: %s: %w", path, c, err)
		}
		var got unix.Stat_t
		if err := unix.Fstat(fd, &got); err != nil || got.Dev != st.Dev || got.Ino != st.Ino {
			unix.Close(fd)
			return "", false, fmt.Errorf("%s: %s changed while it was resolved", path, c)
		}
		unix.Close(cur)
		cur = fd
		if c == ".." {
			curPath = filepath.Dir(curPath)
		} else {
			curPath = filepath.Join(curPath, c)
		}
		if inside, ok, err := check(path); err != nil || ok {
			if ok {
				inside = filepath.Join(append([]string{inside}, rest...)...)
			}
			return inside, ok, err
		}
	}
	return "", false, nil
}

// mountPlace finds a directory's place inside the data root through the
// mount table (/proc/self/mountinfo), for a directory on the data root's
// device that `..` does not lead into it: the root of a bind mount of a
// directory inside the data root. The place found is then opened from the
// data root (openInside: no symlink) and must be that very directory.
type mountPlace struct {
	root     *os.Root
	rootPath string
	want     *unix.Stat_t

	loaded bool
	mounts []mountEntry
	fsRoot string // the data root's path on its file system; "" if unknown
}

type mountEntry struct {
	dev        uint64
	root, mntp string
}

func (m *mountPlace) place(fd int, path string) (string, bool, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", false, err
	}
	if st.Dev != m.want.Dev {
		return "", false, nil
	}
	if !m.loaded {
		m.loaded = true
		m.mounts = readMountInfo()
		if p, err := filepath.EvalSymlinks(m.rootPath); err == nil {
			var rst unix.Stat_t
			if unix.Stat(p, &rst) == nil && rst.Dev == m.want.Dev && rst.Ino == m.want.Ino {
				m.fsRoot = m.fsPath(p)
			}
		}
	}
	if m.fsRoot == "" {
		return "", false, nil
	}
	fsp := m.fsPath(path)
	if fsp == "" {
		return "", false, nil
	}
	rel, err := filepath.Rel(m.fsRoot, fsp)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", false, nil
	}
	d, err := openInside(m.root, rel)
	if err != nil {
		return "", false, fmt.Errorf("a mount of %s inside the data root: %w", rel, err)
	}
	defer d.Close()
	fi, err := d.Stat(".")
	if err != nil || !sameStat(fi, &st) {
		return "", false, fmt.Errorf("a mount of %s inside the data root, which is not found there", rel)
	}
	return rel, true, nil
}

// fsPath is path's path on its file system: the root of the mount it lies
// in joined with the rest of path below the mount point; "" when the mount
// is not found or is not on the data root's device.
func (m *mountPlace) fsPath(path string) string {
	best := -1
	for i, e := range m.mounts {
		if e.dev != m.want.Dev {
			continue
		}
		if e.mntp == path || e.mntp == string(filepath.Separator) || strings.HasPrefix(path, e.mntp+string(filepath.Separator)) {
			if best < 0 || len(e.mntp) >= len(m.mounts[best].mntp) {
				best = i
			}
		}
	}
	if best < 0 {
		return ""
	}
	e := m.mounts[best]
	rel, err := filepath.Rel(e.mntp, path)
	if err != nil {
		return ""
	}
	return filepath.Join(e.root, rel)
}

// readMountInfo parses /proc/self/mountinfo (nil when it cannot be read):
// fields 3 (major:minor), 4 (root) and 5 (mount point), later entries over
// earlier ones on the same mount point.
func readMountInfo() []mountEntry {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []mountEntry
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		var major, minor uint32
		if _, err := fmt.Sscanf(f[2], "%d:%d", &major, &minor); err != nil {
			continue
		}
		out = append(out, mountEntry{dev: uint64(unix.Mkdev(major, minor)), root: unescapeMount(f[3]), mntp: unescapeMount(f[4])})
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// splitPath is path's components ("" and "." included, skipped by the
// caller).
func splitPath(path string) []string {
	return strings.Split(path, string(filepath.Separator))
}

// readlinkat is the text of the symlink name in the directory dirfd.
func readlinkat(dirfd int, name string) (string, error) {
	for n := 256; ; n *= 2 {
		buf := make([]byte, n)
		m, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if m < n {
			return string(buf[:m]), nil
		}
	}
}

func sameStat(fi os.FileInfo, st *unix.Stat_t) bool {
	ss, ok := fi.Sys().(*syscall.Stat_t)
	return ok && uint64(ss.Dev) == uint64(st.Dev) && ss.Ino == st.Ino
}

// placeInside walks up from the directory fd (closed on return) with `..`
// until it reaches the directory want or /, and returns the path from
// want down to fd's directory ("." for want itself), found by name in each
// parent; ok is false when want is not an ancestor.
func placeInside(fd int, want *unix.Stat_t) (string, bool, error) {
	fds := []int{fd}
	defer func() {
		for _, f := range fds {
			unix.Close(f)
		}
	}()
	var stats []unix.Stat_t
	for {
		cur := fds[len(fds)-1]
		var st unix.Stat_t
		if err := unix.Fstat(cur, &st); err != nil {
			return "", false, err
		}
		stats = append(stats, st)
		if st.Dev == want.Dev && st.Ino == want.Ino {
			break
		}
		if len(fds) >= maxPathDepth {
			return "", false, fmt.Errorf("more than %d directories deep: cannot tell whether it lies under the data root", maxPathDepth)
		}
		parent, err := unix.Openat(cur, "..", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", false, err
		}
		var pst unix.Stat_t
		if err := unix.Fstat(parent, &pst); err != nil {
			unix.Close(parent)
			return "", false, err
		}
		if pst.Dev == st.Dev && pst.Ino == st.Ino {
			unix.Close(parent)
			return "", false, nil // reached /
		}
		fds = append(fds, parent)
	}
	names := make([]string, 0, len(fds))
	for j := len(fds) - 2; j >= 0; j-- {
		name, err := nameIn(fds[j+1], &stats[j])
		if err != nil {
			return "", false, err
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return ".", true, nil
	}
	return filepath.Join(names...), true, nil
}

// errNameNotFound is a directory its parent no longer lists (renamed or
// removed while it was looked up).
var errNameNotFound = errors.New("directory not found in its parent")

// nameIn is the name under which the directory parent lists child.
func nameIn(parent int, child *unix.Stat_t) (string, error) {
	dfd, err := unix.Dup(parent)
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(dfd), "..")
	defer f.Close()
	entries, err := f.ReadDir(-1)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if t := e.Type(); t&os.ModeSymlink != 0 || (t != 0 && !t.IsDir()) {
			continue
		}
		var st unix.Stat_t
		if unix.Fstatat(parent, e.Name(), &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Dev == child.Dev && st.Ino == child.Ino {
			return e.Name(), nil
		}
	}
	return "", errNameNotFound
}

// errSymlinkUnderDataRoot is a symlink on an output's path under the data
// root: nothing there is the operator's, so none is followed.
var errSymlinkUnderDataRoot = errors.New("is a symlink under the data root: not followed")

// errNodeDirUnderDataRoot is an output path through a node-N directory:
// those belong to datadir (the nodes' versioned data directories).
var errNodeDirUnderDataRoot = errors.New("is a node's data directory (node-N): no output is written there")

// openInside opens rel, a directory under the data root root, one
// component at a time without following a symlink, and refuses a path
// through a node-N directory. Each component is checked with Lstat, then
// opened and compared with what Lstat saw: a symlink swapped in between is
// refused too.
func openInside(root *os.Root, rel string) (*os.Root, error) {
	rel = filepath.Clean(rel)
	var parts []string
	if rel != "." {
		parts = strings.Split(rel, string(filepath.Separator))
	}
	if len(parts) > 0 && isNodeDirName(parts[0]) {
		return nil, fmt.Errorf("%s %w", parts[0], errNodeDirUnderDataRoot)
	}
	d, err := root.OpenRoot(".")
	if err != nil {
		return nil, err
	}
	for i, c := range parts {
		if c == ".." {
			d.Close()
			return nil, fmt.Errorf("%s: .. under the data root: not followed", filepath.Join(parts[:i+1]...))
		}
		fi, err := d.Lstat(c)
		if err != nil {
			d.Close()
			return nil, err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			d.Close()
			return nil, fmt.Errorf("%s %w", filepath.Join(parts[:i+1]...), errSymlinkUnderDataRoot)
		}
		next, err := d.OpenRoot(c)
		d.Close()
		if err != nil {
			return nil, err
		}
		if nfi, err := next.Stat("."); err != nil || !os.SameFile(fi, nfi) {
			next.Close()
			return nil, fmt.Errorf("%s %w", filepath.Join(parts[:i+1]...), errSymlinkUnderDataRoot)
		}
		d = next
	}
	return d, nil
}

// isNodeDirName is datadir's name for a node's directory: node-<digits>.
func isNodeDirName(name string) bool {
	n, ok := strings.CutPrefix(name, "node-")
	if !ok || n == "" {
		return false
	}
	for _, r := range n {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
