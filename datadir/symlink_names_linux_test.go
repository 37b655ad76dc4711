package datadir

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Issue 24.7: a symlink with two names (a hard link to a symlink, ln -P)
// was recreated as two separate symlinks; cp -a keeps one inode with a
// link count of 2, and so must Prepare, copied or linked.
func TestMultiNameSymlinkKeepsOneInode(t *testing.T) {
	for _, graceful := range []bool{false, true} {
		root := t.TempDir()
		src := makeVersion(t, root, 0, 1, map[string]string{"data/f": "x", "other/keep": "k"}, 1)
		if err := os.Symlink("../data/f", filepath.Join(src, "other/l")); err != nil {
			t.Fatal(err)
		}
		// linkat without AT_SYMLINK_FOLLOW links the symlink itself.
		if err := unix.Linkat(unix.AT_FDCWD, filepath.Join(src, "other/l"), unix.AT_FDCWD, filepath.Join(src, "data/l2"), 0); err != nil {
			t.Fatal(err)
		}
		dir, _ := mustPrepare(t, root, inst(0, 2), Options{PreviousGraceful: graceful})
		a, err1 := os.Lstat(filepath.Join(dir, "other/l"))
		b, err2 := os.Lstat(filepath.Join(dir, "data/l2"))
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if a.Mode()&os.ModeSymlink == 0 || !os.SameFile(a, b) {
			t.Errorf("graceful=%v: other/l and data/l2 are not one symlink in the target (%v, %v)", graceful, a.Mode(), b.Mode())
		}
		if n := a.Sys().(*syscall.Stat_t).Nlink; n != 2 {
			t.Errorf("graceful=%v: the symlink has %d names, want 2", graceful, n)
		}
		for _, rel := range []string{"other/l", "data/l2"} {
			if got, err := os.Readlink(filepath.Join(dir, rel)); err != nil || got != "../data/f" {
				t.Errorf("graceful=%v: %s -> %q (%v), want ../data/f", graceful, rel, got, err)
			}
		}
		// And the next version, from this one.
		mustPrepare(t, root, inst(0, 3), Options{PreviousGraceful: graceful})
	}
}

// Validation accepts a later name only as a link of the symlink Prepare
// made: a separate symlink with the same text in its place is refused.
func TestMultiNameSymlinkReplacedBeforeValidationIsRefused(t *testing.T) {
	root := t.TempDir()
	src := makeVersion(t, root, 0, 1, map[string]string{"data/f": "x"}, 1)
	if err := os.Symlink("f", filepath.Join(src, "data/l")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Linkat(unix.AT_FDCWD, filepath.Join(src, "data/l"), unix.AT_FDCWD, filepath.Join(src, "data/m"), 0); err != nil {
		t.Fatal(err)
	}
	testHookBeforeValidate = func(dir string) {
		p := filepath.Join(dir, "data/m")
		if err := os.Remove(p); err != nil {
			t.Error(err)
		}
		if err := os.Symlink("f", p); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { testHookBeforeValidate = nil })
	_, _, err := Prepare(context.Background(), root, inst(0, 2), Options{Logger: quiet})
	if !errors.Is(err, ErrValidation) {
		t.Fatalf("err = %v, want ErrValidation", err)
	}
}
