package datadir

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDirentTypeUnknownAsksFstatat: where getdents gives no type
// (DT_UNKNOWN, e.g. XFS without ftype), the type comes from fstatat relative
// to the directory, a symlink is not followed, and a name gone meanwhile
// is an error, not a file left out.
func TestDirentTypeUnknownAsksFstatat(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"f": "x", "d/g": "y"})
	if err := os.Symlink("d", filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "p"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for name, want := range map[string]fs.FileMode{"f": 0, "d": fs.ModeDir, "l": fs.ModeSymlink, "p": fs.ModeIrregular} {
		got, err := direntType(int(d.Fd()), name, unix.DT_UNKNOWN)
		if err != nil || got != want {
			t.Errorf("%s: %v, %v; want %v", name, got, err, want)
		}
	}
	if _, err := direntType(int(d.Fd()), "gone", unix.DT_UNKNOWN); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("gone: err = %v, want ErrNotExist", err)
	}
	entries, err := readDirEntries(d)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"d", "f", "l", "p"}; !slices.Equal(names, want) {
		t.Errorf("readDirEntries = %v, want %v", names, want)
	}
}
