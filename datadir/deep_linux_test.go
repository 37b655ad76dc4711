package datadir

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// deepDepth is deeper than descriptors per level allow under lowDescriptors.
const (
	deepDepth      = 150
	lowDescriptors = 128
)

// deepFiles is a chain of deepDepth directories with a file at every level.
func deepFiles() (files map[string]string, deepest string) {
	files = map[string]string{}
	rel := ""
	for i := range deepDepth {
		rel += "d/"
		files[rel+"f"] = "level " + strconv.Itoa(i)
	}
	return files, strings.TrimSuffix(rel, "/")
}

// withLowDescriptors runs f with RLIMIT_NOFILE's soft limit at
// lowDescriptors, and restores it.
func withLowDescriptors(t *testing.T, f func()) {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	low := old
	low.Cur = lowDescriptors
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
			t.Fatal(err)
		}
	}()
	f()
}

// Issue 24.7: the copy, validation and recheck held a source and a target
// directory descriptor per level of the tree, so a tree 150 levels deep
// failed with EMFILE under a limit of 128. Copied and linked, it must be
// carried over faithfully.
func TestDeepTreeDoesNotExhaustDescriptors(t *testing.T) {
	for _, graceful := range []bool{false, true} {
		root := t.TempDir()
		files, deepest := deepFiles()
		src := makeVersion(t, root, 0, 1, files, 1)
		want := maps.Clone(files)
		// A symlink and a multi-name file at the bottom.
		if err := os.Symlink("f", filepath.Join(src, deepest, "l")); err != nil {
			t.Fatal(err)
		}
		want[deepest+"/l"] = "-> f"
		if err := os.Link(filepath.Join(src, deepest, "f"), filepath.Join(src, deepest, "g")); err != nil {
			t.Fatal(err)
		}
		want[deepest+"/g"] = want[deepest+"/f"]
		var dir string
		var err error
		withLowDescriptors(t, func() {
			dir, _, err = Prepare(context.Background(), root, inst(0, 2), Options{Logger: quiet, Workers: 4, PreviousGraceful: graceful})
		})
		if err != nil {
			t.Fatalf("graceful=%v: Prepare of a %d-deep tree with RLIMIT_NOFILE %d: %v", graceful, deepDepth, lowDescriptors, err)
		}
		equalMaps(t, contents(t, dir), want)
		f, err1 := os.Stat(filepath.Join(dir, deepest, "f"))
		g, err2 := os.Stat(filepath.Join(dir, deepest, "g"))
		if err1 != nil || err2 != nil || !os.SameFile(f, g) {
			t.Errorf("graceful=%v: the two names of the deepest file are not one file in the target (%v, %v)", graceful, err1, err2)
		}
	}
}

// Issue 24.7: GC removed a version with one directory descriptor held per
// level, so a version 150 levels deep was never collected under a limit of
// 128 (EMFILE at every run).
func TestDeepVersionIsCollected(t *testing.T) {
	root := t.TempDir()
	files, _ := deepFiles()
	old := makeVersion(t, root, 0, 1, files, 1)
	mustPrepare(t, root, inst(0, 2), Options{})
	var removed []string
	var err error
	withLowDescriptors(t, func() {
		removed, err = Collect(context.Background(), root, inst(0, 2), Options{Logger: quiet, Keep: 1})
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || exists(t, old) {
		t.Errorf("Collect with RLIMIT_NOFILE %d removed %v; %s still there: %v", lowDescriptors, removed, old, exists(t, old))
	}
	// And Prepare's own GC, of the 150-deep v2.
	withLowDescriptors(t, func() {
		_, _, err = Prepare(context.Background(), root, inst(0, 3), Options{Logger: quiet, Keep: 1})
	})
	if err != nil {
		t.Fatal(err)
	}
	if v2 := Dir(root, inst(0, 2)); exists(t, v2) {
		t.Errorf("Prepare with Keep 1 and RLIMIT_NOFILE %d left %s", lowDescriptors, v2)
	}
}

// A deep source directory moved away during the walk, and replaced by a
// symlink to where it went or by another directory, is not walked into
// when its descriptor is opened again: Prepare fails, the target gets no
// marker.
func TestDeepDirectorySwappedDuringTheWalkIsRefused(t *testing.T) {
	for _, how := range []string{"symlink", "directory"} {
		t.Run(how, func(t *testing.T) {
			root := t.TempDir()
			files, _ := deepFiles()
			src := makeVersion(t, root, 0, 1, files, 1)
			swapped := filepath.Join(src, strings.Repeat("d/", 60))
			trigger := strings.Repeat("d/", 120) + "f"
			testHookFile = func(rel string) {
				if rel != trigger {
					return
				}
				moved := filepath.Join(root, "moved")
				if err := os.Rename(swapped, moved); err != nil {
					t.Error(err)
				}
				var err error
				if how == "symlink" {
					err = os.Symlink(moved, filepath.Clean(swapped))
				} else {
					err = os.Mkdir(swapped, 0o755)
				}
				if err != nil {
					t.Error(err)
				}
			}
			t.Cleanup(func() { testHookFile = nil })
			_, _, err := Prepare(context.Background(), root, inst(0, 2), Options{Logger: quiet, Workers: 1})
			if err == nil {
				t.Fatal("Prepare succeeded with a source directory swapped during the walk")
			}
			if how == "directory" && !errors.Is(err, ErrValidation) {
				t.Errorf("err = %v, want ErrValidation", err)
			}
			if exists(t, filepath.Join(Dir(root, inst(0, 2)), MarkerName)) {
				t.Error("the target got a marker")
			}
		})
	}
}
