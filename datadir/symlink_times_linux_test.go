package datadir

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Copies keep times as cp -a does, symlinks included (a regression test
// from review 2: a recreated symlink used to get the time of the copy).
func TestSymlinkTimesAreKept(t *testing.T) {
	root := t.TempDir()
	v1 := makeVersion(t, root, 0, 1, map[string]string{"data": "x"}, 1)
	link := filepath.Join(v1, "current")
	if err := os.Symlink("data", link); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	ts := []unix.Timespec{unix.NsecToTimespec(old.UnixNano()), unix.NsecToTimespec(old.UnixNano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, link, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
	dir, _ := mustPrepare(t, root, inst(0, 2), Options{Cluster: clusterA})
	fi, err := os.Lstat(filepath.Join(dir, "current"))
	if err != nil {
		t.Fatal(err)
	}
	if !fi.ModTime().Equal(old) {
		t.Errorf("symlink mtime %v in the copy, %v in the source", fi.ModTime().UTC(), old)
	}
}
