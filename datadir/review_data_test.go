package datadir

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Adversarial review (wt-review-data). Each test states the schedule it
// plays and fails on the code as reviewed.

// otiai10/copy writes the target by path (os.Create with O_TRUNC, MkdirAll,
// Chmod, Chtimes), all following symlinks. docs/datadir.md says a tenant
// who swaps entries while Prepare runs "could redirect the otiai10 writes
// ... inside the root"; a symlink planted in the target can point anywhere.
//
// Schedule: Prepare(v2) copies v1 (ungraceful: copy mode). Just before the
// file "b" is copied, a tenant (same uid, same EFS access point) plants
// v2/b -> <outside>/victim and v2/d -> <outside>/dir. Prepare truncates
// and overwrites victim, writes d's files into <outside>/dir and chmods it.
func TestReviewPrepareWritesOutsideTheRootThroughPlantedTargetSymlinks(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("not yours"), 0o600); err != nil {
		t.Fatal(err)
	}
	victimDir := filepath.Join(outside, "dir")
	if err := os.Mkdir(victimDir, 0o700); err != nil {
		t.Fatal(err)
	}
	v1 := makeVersion(t, root, 0, 1, map[string]string{"a": "alpha", "b": "beta from v1", "d/f": "file of d"}, 1)
	if err := os.Chmod(filepath.Join(v1, "d"), 0o777); err != nil {
		t.Fatal(err)
	}
	target := Dir(root, inst(0, 2))
	planted := false
	setHook(t, &testHookFile, func(rel string) {
		if rel != "b" || planted {
			return
		}
		planted = true
		if err := os.Symlink(victim, filepath.Join(target, "b")); err != nil {
			t.Error(err)
		}
		if err := os.Symlink(victimDir, filepath.Join(target, "d")); err != nil {
			t.Error(err)
		}
	})
	_, _, err := Prepare(context.Background(), root, inst(0, 2), Options{Logger: quiet, Cluster: clusterA})
	t.Logf("Prepare: %v", err)
	if !planted {
		t.Fatal("hook never ran")
	}
	if b, _ := os.ReadFile(victim); string(b) != "not yours" {
		t.Errorf("Prepare wrote outside the data root: %s = %q", victim, b)
	}
	if exists(t, filepath.Join(victimDir, "f")) {
		t.Errorf("Prepare created %s outside the data root", filepath.Join(victimDir, "f"))
	}
	if fi, err := os.Stat(victimDir); err == nil && fi.Mode().Perm() != 0o700 {
		t.Errorf("Prepare chmodded %s outside the data root: %v, was 0700", victimDir, fi.Mode().Perm())
	}
}

// A version directory above the source that Prepare cannot judge is
// refused when its marker is unreadable ("it may be a newer version ...
// starting from older data would roll the node back"), but not when it is a
// symlink: a vJ swapped for a symlink to the same data (an operator moving
// it to another volume, a tenant's rename) holds a valid marker for J, yet
// Prepare(J+1) silently starts from J-1, the older data.
func TestReviewSymlinkedNewerVersionRollsBack(t *testing.T) {
	root, elsewhere := t.TempDir(), t.TempDir()
	makeVersion(t, root, 0, 1, map[string]string{"data": "old v1"}, 1)
	moved := makeVersion(t, elsewhere, 0, 2, map[string]string{"data": "newest v2"}, 2)
	if err := os.Symlink(moved, Dir(root, inst(0, 2))); err != nil {
		t.Fatal(err)
	}
	dir, res, err := Prepare(context.Background(), root, inst(0, 3), Options{Logger: quiet, Cluster: clusterA})
	if err != nil {
		if errors.Is(err, ErrUnrecognized) || errors.Is(err, ErrNewerVersion) {
			return
		}
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "data"))
	t.Errorf("Prepare(v3) with v2 a symlink to a valid v2: built from v%d, data = %q (rolled back past v2's %q)", res.Source, b, "newest v2")
}

// GC checks a version directory with Lstat (inspect) and then removes it by
// path through os.Root (removeValid, removeLeftover), which follows a
// symlink that stays inside node-N. A tenant that swaps the directory for a
// symlink in between (rename v1 away, symlink v1 -> v2) makes GC delete the
// marker and the files of the version the symlink points to.
//
// Schedule: v1 valid and beyond Keep, v2 current. Collect(v2, Keep 1)
// inspects v1 (a valid directory) and writes v1/.nodeid-preparing; the
// tenant sees that file appear and swaps v1 for a symlink to v2 during the
// fsyncs that follow; GC then removes "v1/directory-initialized.json" and
// every entry of "v1", i.e. of v2.
func TestReviewGCSwappedForSymlinkDeletesCurrentVersion(t *testing.T) {
	for attempt := 0; attempt < 20; attempt++ {
		root := t.TempDir()
		v1 := makeVersion(t, root, 0, 1, map[string]string{"data": "garbage v1"}, 1)
		v2 := makeVersion(t, root, 0, 2, map[string]string{"data": "current v2", "snap/s": "snapshot"}, 2)
		swapped := make(chan bool, 1)
		go func() {
			for i := 0; i < 2_000_000; i++ {
				if _, err := os.Lstat(filepath.Join(v1, PreparingName)); err == nil {
					if os.Rename(v1, v1+".moved") == nil && os.Symlink("v2", v1) == nil {
						swapped <- true
						return
					}
					break
				}
			}
			swapped <- false
		}()
		_, err := Collect(context.Background(), root, inst(0, 2), Options{Keep: 1, Logger: quiet})
		if !<-swapped {
			continue
		}
		got := snapshotTree(t, v2)
		if _, ok := got["data"]; !ok || !exists(t, filepath.Join(v2, MarkerName)) {
			t.Fatalf("attempt %d: Collect(current v2) after v1 was swapped for a symlink to v2 (Collect err: %v): v2 now holds %v (marker and data of the current version deleted)",
				attempt, err, keys(got))
		}
		t.Logf("attempt %d: swap landed but v2 intact (Collect err: %v)", attempt, err)
	}
}
