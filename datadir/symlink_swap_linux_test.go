package datadir

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Regression (review): a stale holder swaps a symlink of the source (s/b) back and forth
// while the copy and its validation run. Every symlink is judged against
// the source as it is at that moment, never against the target as made, so
// s/d -> b/b/b/b/b/../../../../../.. is judged with s/b -> x (inside), while
// the target's s/b, copied and validated when it was ".", makes s/d resolve
// six levels up: above the data root. The escape check is defeated and
// Prepare marks the directory valid.
//
// Schedule (entries are handled in name order: s/b, s/c, s/d; Workers 1):
// copy s/b (".") | before s/c is copied: s/b -> "x" | s/d judged inside |
// before validation: s/b -> "." | validation of s/b: same as the target |
// s/c opened for VerifyContent (inotify IN_OPEN): s/b -> "x" | validation
// of s/d judged inside | marker. Validation now resolves the target's
// links in the target, which only the preparation writes: s/d is refused.
func TestSymlinkSwappedInTheSourceIsJudgedInTheTarget(t *testing.T) {
	root := t.TempDir()
	const up = "b/b/b/b/b/../../../../../.."
	v1 := makeVersion(t, root, 0, 1, map[string]string{
		"s/c":      strings.Repeat("c", 64<<20),
		"s/x/keep": "k",
	}, 1)
	s := filepath.Join(v1, "s")
	if err := os.Symlink(".", filepath.Join(s, "b")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(up, filepath.Join(s, "d")); err != nil {
		t.Fatal(err)
	}
	flip := func(to string) {
		tmp := filepath.Join(root, "tmp-link")
		os.Remove(tmp)
		if err := os.Symlink(to, tmp); err != nil {
			t.Error(err)
			return
		}
		if err := os.Rename(tmp, filepath.Join(s, "b")); err != nil {
			t.Error(err)
		}
	}
	testHookFile = func(rel string) {
		if rel == "s/c" {
			flip("x")
		}
	}
	done := make(chan struct{})
	testHookBeforeValidate = func(string) {
		flip(".")
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := unix.InotifyAddWatch(fd, filepath.Join(s, "c"), unix.IN_OPEN); err != nil {
			t.Error(err)
			return
		}
		go func() {
			defer close(done)
			defer unix.Close(fd)
			buf := make([]byte, 4096)
			unix.Read(fd, buf)
			flip("x")
		}()
	}
	t.Cleanup(func() { testHookFile, testHookBeforeValidate = nil, nil })

	dir, _, err := Prepare(context.Background(), root, inst(0, 2), Options{Logger: quiet, Workers: 1, VerifyContent: true})
	<-done
	if errors.Is(err, ErrUnsafeSymlink) {
		t.Logf("Prepare v2 refused: %v", err)
		return
	}
	if err != nil {
		t.Fatalf("Prepare v2: %v, want ErrUnsafeSymlink", err)
	}
	lt, _ := os.Readlink(filepath.Join(dir, "s", "b"))
	dt, _ := os.Readlink(filepath.Join(dir, "s", "d"))
	resolved, rerr := filepath.EvalSymlinks(filepath.Join(dir, "s", "d"))
	t.Logf("target: s/b -> %q, s/d -> %q, s/d resolves to %s (%v); data root %s", lt, dt, resolved, rerr, root)
	if rerr == nil && !strings.HasPrefix(resolved+"/", dir+"/") {
		t.Errorf("Prepare v2 succeeded with %s/s/d resolving outside the version directory, to %s (outside the data root: %v)",
			dir, resolved, !strings.HasPrefix(resolved+"/", root+"/"))
	}
}
