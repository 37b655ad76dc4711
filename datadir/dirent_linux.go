package datadir

import (
	"encoding/binary"
	"io/fs"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// statType is the type of name in dirfd, by fstatat without following a
// symlink.
func statType(dirfd int, name string) (fs.FileMode, error) {
	var st unix.Stat_t
	if err := fstatat(dirfd, name, &st); err != nil {
		return 0, err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return 0, nil
	case unix.S_IFDIR:
		return fs.ModeDir, nil
	case unix.S_IFLNK:
		return fs.ModeSymlink, nil
	}
	return fs.ModeIrregular, nil
}

// readDirEntries lists dir from its start, sorted, with the types getdents
// gives: no round trip per entry on NFS. Where the file system gives none
// (DT_UNKNOWN) it asks fstatat relative to dir, never a path (os.ReadDir
// would lstat by path).
func readDirEntries(dir *os.File) ([]dirEntry, error) {
	return readDirEntriesFlags(dir, 0)
}

// readDirEntriesFlags is readDirEntries, reopening dir with the open(2)
// flags extra added (O_NOATIME: see openKeepingAtime).
func readDirEntriesFlags(dir *os.File, extra int) ([]dirEntry, error) {
	d, err := openDirAtFlags(dir, ".", extra)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	fd := int(d.Fd())
	var out []dirEntry
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return nil, &os.PathError{Op: "getdents", Path: d.Name(), Err: err}
		}
		if n <= 0 {
			break
		}
		// struct linux_dirent64: ino 8, off 8, reclen 2, type 1, name.
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				break
			}
			typ, name := b[18], b[19:reclen]
			if i := slices.Index(name, 0); i >= 0 {
				name = name[:i]
			}
			b = b[reclen:]
			if s := string(name); s != "." && s != ".." {
				m, err := direntType(fd, s, typ)
				if err != nil {
					return nil, err
				}
				out = append(out, dirEntry{name: s, typ: m})
			}
		}
	}
	slices.SortFunc(out, func(a, b dirEntry) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

func direntType(dirfd int, name string, typ uint8) (fs.FileMode, error) {
	switch typ {
	case unix.DT_REG:
		return 0, nil
	case unix.DT_DIR:
		return fs.ModeDir, nil
	case unix.DT_LNK:
		return fs.ModeSymlink, nil
	case unix.DT_FIFO:
		return fs.ModeNamedPipe, nil // special files are left out
	case unix.DT_SOCK:
		return fs.ModeSocket, nil
	case unix.DT_CHR:
		return fs.ModeDevice | fs.ModeCharDevice, nil
	case unix.DT_BLK:
		return fs.ModeDevice, nil
	}
	return statType(dirfd, name)
}
