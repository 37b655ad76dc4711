package datadir

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Copies keep their source's access times, as cp -a does. After an
// ungraceful takeover validation reads every copied file (byte compare)
// and lists every target directory after their times were set: on a
// relatime mount (the default) that used to make the access time of a copy
// whose source was last read more than a day ago the preparation's.
func TestAccessTimesOfCopiesAreKept(t *testing.T) {
	root := t.TempDir()
	v1 := makeVersion(t, root, 0, 1, map[string]string{"sub/data": "x"}, 1)
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, p := range []string{filepath.Join(v1, "sub", "data"), filepath.Join(v1, "sub")} {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	dir, _ := mustPrepare(t, root, inst(0, 2), Options{}) // ungraceful
	for _, rel := range []string{"sub/data", "sub"} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, rel), &st); err != nil {
			t.Fatal(err)
		}
		if at := time.Unix(st.Atim.Unix()).UTC(); !at.Equal(old) {
			t.Errorf("%s: atime %v in the copy, %v in the source (cp -a keeps it)", rel, at, old)
		}
	}
}

// vK gets vJ's times. The marker and the in-progress file are written into
// (and removed from) vK after the walk: its times used to be set before
// them, so its mtime was the preparation's.
func TestVersionDirectoryKeepsTheSourcesMtime(t *testing.T) {
	root := t.TempDir()
	v1 := makeVersion(t, root, 0, 1, map[string]string{"data": "x"}, 1)
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(v1, old, old); err != nil {
		t.Fatal(err)
	}
	dir, _ := mustPrepare(t, root, inst(0, 2), Options{PreviousGraceful: true})
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.ModTime().Equal(old) {
		t.Errorf("v2 mtime %v, v1's %v", fi.ModTime().UTC(), old)
	}
}
