package datadir

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Issue 24.5: a link that stays inside but does not resolve (a loop:
// ELOOP; a path through a regular file: ENOTDIR) is copied, as cp -a
// does; it used to be refused as escaping, and then every later
// preparation failed.
func TestSymlinksThatDoNotResolveAreKept(t *testing.T) {
	links := map[string]string{
		"self":         "self",
		"loop-a":       "loop-b",
		"loop-b":       "loop-a",
		"data/through": "keep/x",        // data/keep is a file: ENOTDIR
		"into-loop":    "loop-a/x/../y", // through a loop
		"deep/file":    "../data/keep/../../data",
	}
	for _, graceful := range []bool{false, true} {
		root := t.TempDir()
		src := makeVersion(t, root, 0, 1, map[string]string{"data/keep": "k", "deep/f": "f"}, 1)
		want := map[string]string{"data/keep": "k", "deep/f": "f"}
		for link, target := range links {
			if err := os.Symlink(target, filepath.Join(src, link)); err != nil {
				t.Fatal(err)
			}
			want[link] = "-> " + target
		}
		dir, res := mustPrepare(t, root, inst(0, 2), Options{PreviousGraceful: graceful})
		equalMaps(t, contents(t, dir), want)
		if res.Symlinks != int64(len(links)) {
			t.Errorf("graceful=%v: Symlinks = %d, want %d", graceful, res.Symlinks, len(links))
		}
		// And the next version, from this one.
		mustPrepare(t, root, inst(0, 3), Options{PreviousGraceful: graceful})
	}
}

// Links that escape only once resolved through other links, or whose
// escape follows a component that does not resolve, are still refused.
func TestSymlinkEscapesJudgedWithoutFollowing(t *testing.T) {
	for name, links := range map[string]map[string]string{
		"through a link to .":         {"b": ".", "a": "b/../secret"},
		"through a chain":             {"c": "d", "d": "data/..", "a": "c/../x"},
		"through a link to a sibling": {"data/up": "..", "a": "data/up/../x"},
		"absolute link on the way":    {"abs": "/tmp", "a": "abs/x"},
		"after a missing component":   {"data/a": "missing/../../../x"},
		"after a file":                {"data/a": "keep/../../../x"},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			src := makeVersion(t, root, 0, 1, map[string]string{"data/keep": "k"}, 1)
			for link, target := range links {
				if err := os.Symlink(target, filepath.Join(src, link)); err != nil {
					t.Fatal(err)
				}
			}
			_, _, err := Prepare(context.Background(), root, inst(0, 2), Options{Logger: quiet})
			if !errors.Is(err, ErrUnsafeSymlink) {
				t.Fatalf("err = %v, want ErrUnsafeSymlink", err)
			}
		})
	}
}

// A loop whose text has a ".." after the self-reference (l -> l/..) never
// resolves (ELOOP) and stays inside: kept, as cp -a keeps it. The ".."
// of every expansion used to pile up past the 40th and read as an escape,
// so every later preparation failed.
func TestSymlinkLoopWithDotDotIsKept(t *testing.T) {
	for name, l := range map[string][2]string{
		"top":    {"l", "l/.."},
		"subdir": {"d/l", "../d/l/.."},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			src := makeVersion(t, root, 0, 1, map[string]string{"d/f": "f"}, 1)
			if err := os.Symlink(l[1], filepath.Join(src, l[0])); err != nil {
				t.Fatal(err)
			}
			// The kernel never resolves it.
			if _, err := os.Stat(filepath.Join(src, l[0])); !errors.Is(err, syscall.ELOOP) {
				t.Fatalf("stat %s: %v, want ELOOP", l[0], err)
			}
			dir, _, err := Prepare(context.Background(), root, inst(0, 2), Options{Logger: quiet})
			if err != nil {
				t.Fatalf("Prepare with %s -> %s (a loop, lexically inside): %v", l[0], l[1], err)
			}
			if got, _ := os.Readlink(filepath.Join(dir, l[0])); got != l[1] {
				t.Errorf("%s -> %q, want %q", l[0], got, l[1])
			}
		})
	}
}
