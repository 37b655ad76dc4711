package datadir

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodeid/nodeid/nodeid"
)

// Schedules from an adversarial review in which another task with our uid
// plants entries in the data root (it is shared storage: treat it as
// hostile). Each failed before its fix.

// GC turns a valid old version into "our leftover" by writing
// .nodeid-preparing with O_CREATE|O_TRUNC (removeValid -> writeInProgress).
// os.Root follows a symlink inside node-N, so a symlink planted as
// vJ/.nodeid-preparing redirects that truncating write to any file of any
// other version of the node, here the data of the version just prepared.
//
// Schedule: a tenant plants node-0/v1/.nodeid-preparing -> ../v3/data.log
// (v1 is a valid old version). A task prepares v3 from v2 with Keep 1;
// its GC removes v1 and, before that, overwrites v3/data.log.
func TestGCDoesNotWriteThroughAPlantedInProgressSymlink(t *testing.T) {
	root := t.TempDir()
	v1 := makeVersion(t, root, 0, 1, map[string]string{"data.log": "old v1"}, 1)
	makeVersion(t, root, 0, 2, map[string]string{"data.log": "precious data of v2"}, 2)
	if err := os.Symlink("../v3/data.log", filepath.Join(v1, PreparingName)); err != nil {
		t.Fatal(err)
	}

	dir, _ := mustPrepare(t, root, inst(0, 3), Options{Keep: 1, Cluster: clusterA})

	b, err := os.ReadFile(filepath.Join(dir, "data.log"))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "precious data of v2" {
		t.Errorf("GC of v1 wrote into the live directory: %s/data.log = %q, want %q", dir, b, "precious data of v2")
	}
}

// Same, with Collect on its own, and with a hard link as well as a symlink:
// the file overwritten would be the data of the current version, which
// Collect promises never to touch. The planted entry is replaced, not
// written through, and v1 and v2 are
// still removed.
func TestCollectDoesNotWriteThroughAPlantedInProgressFile(t *testing.T) {
	for _, how := range []string{"symlink", "hard link"} {
		t.Run(how, func(t *testing.T) {
			root := t.TempDir()
			v1 := makeVersion(t, root, 0, 1, map[string]string{"data.log": "old v1"}, 1)
			v2 := makeVersion(t, root, 0, 2, map[string]string{"data.log": "v2"}, 2)
			v3 := makeVersion(t, root, 0, 3, map[string]string{"data.log": "current v3"}, 3)
			var err error
			if how == "symlink" {
				err = os.Symlink("../v3/data.log", filepath.Join(v1, PreparingName))
			} else {
				err = os.Link(filepath.Join(v3, "data.log"), filepath.Join(v1, PreparingName))
			}
			if err != nil {
				t.Fatal(err)
			}
			removed, err := Collect(context.Background(), root, inst(0, 3), Options{Keep: 1, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(v3, "data.log"))
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != "current v3" {
				t.Errorf("Collect(current v3) overwrote %s/data.log: %q", v3, b)
			}
			if want := []string{v2, v1}; !slices.Equal(removed, want) {
				t.Errorf("removed %v, want %v", removed, want)
			}
		})
	}
}

// GC used to check a version directory with Lstat (inspect) and then remove
// it by path through os.Root (removeValid, removeLeftover), which follows a
// symlink that stays inside node-N. A tenant that swaps the directory for a
// symlink in between (rename v1 away, symlink v1 -> v2) makes GC delete the
// marker and the files of the version the symlink points to.
//
// Schedule: v1 valid and beyond Keep, v2 current. Collect(v2, Keep 1)
// inspects v1 (a valid directory) and writes v1/.nodeid-preparing; the
// tenant sees that file appear and swaps v1 for a symlink to v2 during the
// fsyncs that follow; GC then removes "v1/directory-initialized.json" and
// every entry of "v1", i.e. of v2.
func TestGCOfAVersionSwappedForASymlinkSparesItsTarget(t *testing.T) {
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
		t.Logf("attempt %d: swap landed, v2 intact (Collect err: %v)", attempt, err)
		return
	}
	t.Skip("the swap never landed between inspection and removal")
}

// The same swap, deterministic and for every kind of directory GC removes
// (and Prepare's redo of a leftover target): removal works below the
// directory that was inspected, and rmdir of the name refuses once it is
// no longer that directory.
func TestRemovalWorksOnTheInspectedDirectory(t *testing.T) {
	for _, kind := range []string{"valid", "leftover", "empty"} {
		t.Run(kind, func(t *testing.T) {
			root := t.TempDir()
			var v1 string
			switch kind {
			case "valid":
				v1 = makeVersion(t, root, 0, 1, map[string]string{"data": "garbage v1", "sub/x": "y"}, 1)
			case "leftover":
				v1 = makeVersion(t, root, 0, 1, map[string]string{"data": "partial", "sub/x": "y"}, -1)
				writePreparing(t, v1, 1, clusterA)
			case "empty":
				v1 = makeVersion(t, root, 0, 1, nil, -1)
			}
			v2 := makeVersion(t, root, 0, 2, map[string]string{"data": "current v2", "sub/x": "live"}, 2)
			before := snapshotTree(t, v2)

			r, err := os.OpenRoot(root)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			node, err := openNodeDir(r, "node-0", 0, false)
			if err != nil {
				t.Fatal(err)
			}
			defer node.Close()
			e, err := inspect(node.f, "v1", 1, clusterA, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer e.close()
			if err := os.Rename(v1, v1+".moved"); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("v2", v1); err != nil {
				t.Fatal(err)
			}
			if kind == "valid" {
				err = removeValid(node, &e, clusterA, nil)
			} else {
				err = removeUnfinished(node, &e, nil)
			}
			if err == nil {
				t.Error("removal of a directory swapped for a symlink succeeded")
			}
			equalMaps(t, snapshotTree(t, v2), before)
			if fi, err := os.Lstat(v1); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
				t.Errorf("the symlink in v1's place: %v, %v", fi, err)
			}
		})
	}
}

// Removal never follows a symlink inside the garbage either.
func TestGCDoesNotFollowSymlinksInsideWhatItRemoves(t *testing.T) {
	root := t.TempDir()
	v1 := makeVersion(t, root, 0, 1, map[string]string{"data": "garbage"}, 1)
	v2 := makeVersion(t, root, 0, 2, map[string]string{"data": "current", "snap/s": "snapshot"}, 2)
	for link, target := range map[string]string{"dir": "../v2", "snap": "../v2/snap", "file": "../v2/data", "abs": v2} {
		if err := os.Symlink(target, filepath.Join(v1, link)); err != nil {
			t.Fatal(err)
		}
	}
	before := snapshotTree(t, v2)
	removed, err := Collect(context.Background(), root, inst(0, 2), Options{Keep: 1, Logger: quiet})
	if err != nil || !slices.Equal(removed, []string{v1}) {
		t.Fatalf("Collect = %v, %v", removed, err)
	}
	equalMaps(t, snapshotTree(t, v2), before)
}

// A version directory above the source that Prepare cannot judge is
// refused when its marker is unreadable, and was skipped when it is a
// symlink: a vJ swapped for a symlink to the same data (an operator moving
// it to another volume, a tenant's rename) holds a valid marker for J, yet
// Prepare(J+1) silently started from J-1, the older data. A symlink is
// never followed, so it cannot be judged: Prepare refuses, writing nothing,
// and so does Newest (release --force --data-root). The same for a file
// named like a version. Below the source, both are left alone.
func TestSymlinkedNewerVersionIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    nodeid.Version
		file bool
	}{
		{"symlink between the source and the target", 2, false},
		{"symlink above the target", 4, false},
		{"file between the source and the target", 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, elsewhere := t.TempDir(), t.TempDir()
			makeVersion(t, root, 0, 1, map[string]string{"data": "old v1"}, 1)
			p := Dir(root, inst(0, tc.v))
			if tc.file {
				writeFiles(t, filepath.Dir(p), map[string]string{filepath.Base(p): "x"})
			} else {
				moved := makeVersion(t, elsewhere, 0, tc.v, map[string]string{"data": "newest"}, tc.v)
				if err := os.Symlink(moved, p); err != nil {
					t.Fatal(err)
				}
			}
			before := snapshotTree(t, root)
			_, res, err := Prepare(context.Background(), root, inst(0, 3), Options{Logger: quiet, Cluster: clusterA})
			if !errors.Is(err, ErrUnrecognized) || !strings.Contains(err.Error(), p) {
				t.Fatalf("Prepare(v3) = %v (source v%d), want ErrUnrecognized naming %s", err, res.Source, p)
			}
			equalMaps(t, snapshotTree(t, root), before)
			if v, ok, err := Newest(root, 0, clusterA); !errors.Is(err, ErrUnrecognized) {
				t.Errorf("Newest = %d, %v, %v, want ErrUnrecognized", v, ok, err)
			}
		})
	}
	t.Run("below the source", func(t *testing.T) {
		root, elsewhere := t.TempDir(), t.TempDir()
		makeVersion(t, root, 0, 2, map[string]string{"data": "v2"}, 2)
		moved := makeVersion(t, elsewhere, 0, 1, map[string]string{"data": "v1"}, 1)
		if err := os.Symlink(moved, Dir(root, inst(0, 1))); err != nil {
			t.Fatal(err)
		}
		claimRoot(t, root, clusterA)
		_, res := mustPrepare(t, root, inst(0, 3), Options{Keep: 1, Cluster: clusterA})
		if res.Source != 2 || len(res.Removed) != 1 || res.Removed[0] != Dir(root, inst(0, 2)) {
			t.Errorf("source v%d, removed %v; want v2, [v2]", res.Source, res.Removed)
		}
		if !exists(t, Dir(root, inst(0, 1))) || !exists(t, filepath.Join(moved, MarkerName)) {
			t.Error("the symlink below the source, or what it points to, was removed")
		}
		if v, ok, err := Newest(root, 0, clusterA); err != nil || !ok || v != 3 {
			t.Errorf("Newest = %d, %v, %v, want 3", v, ok, err)
		}
	})
}

// otiai10/copy, which Prepare used to copy with, wrote the target by path
// (os.Create with O_TRUNC, MkdirAll, Chmod, Chtimes), all following
// symlinks, so a symlink planted in the target while Prepare ran redirected
// those writes anywhere, out of the data root too.
//
// Schedule: Prepare(v2) copies or links v1. Just before the file "b" (or
// the directory "d") is carried over, a tenant (same uid, same EFS access
// point) plants v2/b -> <outside>/victim and v2/d -> <outside>/dir. Prepare
// used to overwrite victim, write d's files into <outside>/dir and chmod
// it. Now the planted entry makes the copy fail, nothing outside is
// touched, and the next Prepare removes the leftover (the planted symlinks
// themselves, not what they point to) and redoes it.
func TestPrepareDoesNotWriteThroughEntriesPlantedInTheTarget(t *testing.T) {
	for _, tc := range []struct {
		name     string
		plant    string // planted just before "b" is carried over
		graceful bool
	}{
		{"file, copied", "b", false},
		{"file, linked", "b", true},
		{"directory", "d", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, outside := t.TempDir(), t.TempDir()
			victim := filepath.Join(outside, "victim")
			if err := os.WriteFile(victim, []byte("not yours"), 0o600); err != nil {
				t.Fatal(err)
			}
			victimDir := filepath.Join(outside, "dir")
			if err := os.Mkdir(victimDir, 0o700); err != nil {
				t.Fatal(err)
			}
			files := map[string]string{"a": "alpha", "b": "beta from v1", "d/f": "file of d"}
			v1 := makeVersion(t, root, 0, 1, files, 1)
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
				to := map[string]string{"b": victim, "d": victimDir}[tc.plant]
				if err := os.Symlink(to, filepath.Join(target, tc.plant)); err != nil {
					t.Error(err)
				}
			})
			// One worker does a directory's files before its
			// subdirectories: "d" is planted before it is made.
			opts := Options{Logger: quiet, Cluster: clusterA, PreviousGraceful: tc.graceful, Tenure: "task-1", Workers: 1}
			_, _, err := Prepare(context.Background(), root, inst(0, 2), opts)
			if !planted {
				t.Fatal("hook never ran")
			}
			if err == nil {
				t.Error("Prepare succeeded with entries planted in its target")
			}
			checkOutside := func() {
				t.Helper()
				if b, _ := os.ReadFile(victim); string(b) != "not yours" {
					t.Errorf("Prepare wrote outside the data root: %s = %q", victim, b)
				}
				if entries, _ := os.ReadDir(victimDir); len(entries) != 0 {
					t.Errorf("Prepare created %d entries in %s outside the data root", len(entries), victimDir)
				}
				if fi, err := os.Stat(victimDir); err != nil || fi.Mode().Perm() != 0o700 {
					t.Errorf("Prepare chmodded %s outside the data root: %v, was 0700 (%v)", victimDir, fi.Mode().Perm(), err)
				}
			}
			checkOutside()

			if exists(t, Dir(root, inst(0, 2))) {
				t.Error("the failed target stayed")
			}
			testHookFile = nil
			dir, _ := mustPrepare(t, root, inst(0, 2), opts)
			equalMaps(t, contents(t, dir), files)
			checkOutside()
		})
	}
}
