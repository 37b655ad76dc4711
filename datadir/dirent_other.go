//go:build unix && !linux

package datadir

import (
	"io/fs"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// readDirEntries lists dir from its start, sorted, with types from
// fstatat relative to dir (the portable way; Linux reads them from getdents).
func readDirEntries(dir *os.File) ([]dirEntry, error) {
	return readDirEntriesFlags(dir, 0)
}

// readDirEntriesFlags is readDirEntries, reopening dir with the open(2)
// flags extra added.
func readDirEntriesFlags(dir *os.File, extra int) ([]dirEntry, error) {
	names, err := readDirNamesFlags(dir, extra)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(names, strings.Compare)
	out := make([]dirEntry, 0, len(names))
	for _, n := range names {
		var st unix.Stat_t
		if err := fstatat(int(dir.Fd()), n, &st); err != nil {
			return nil, err
		}
		m := fs.ModeIrregular
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			m = 0
		case unix.S_IFDIR:
			m = fs.ModeDir
		case unix.S_IFLNK:
			m = fs.ModeSymlink
		}
		out = append(out, dirEntry{name: n, typ: m})
	}
	return out, nil
}
