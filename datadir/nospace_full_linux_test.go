package datadir

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Issue 24.6: a file system filled to the last page (by a stale holder,
// say) holds v1, a valid version beyond retention once v3 is valid (Keep
// 2), and v2, the source. Whatever step of preparing v3 runs out of space,
// v1 is removed for it and the preparation made once more.

// The in-progress file of v3 cannot be written: out of space before the
// copy.
func TestNoSpaceForTheInProgressFileFreesOldVersions(t *testing.T) {
	big := string(bytes.Repeat([]byte("x"), 1500<<10))
	root := tmpfsWithTwoVersions(t, big)
	fillUp(t, filepath.Join(Dir(root, inst(0, 1)), "fill"))
	prepareOnFullDisk(t, root, big)
}

// Exactly the room for the in-progress file and the copy: the marker finds
// no space, after the copy.
func TestNoSpaceForTheMarkerFreesOldVersions(t *testing.T) { noSpaceWithSlack(t, 201) }

// One page free: the in-progress file of v3 takes it and the copy fails at
// its first byte. Removing v1 for space must itself need none (earlier it
// wrote an in-progress file into v1 first).
func TestNoSpaceRemovingAValidVersionNeedsNoSpace(t *testing.T) { noSpaceWithSlack(t, 1) }

func noSpaceWithSlack(t *testing.T, slackPages int) {
	big := string(bytes.Repeat([]byte("x"), 800<<10)) // 200 pages
	root := tmpfsWithTwoVersions(t, big)
	v1 := Dir(root, inst(0, 1))
	slack := filepath.Join(v1, "slack")
	if err := os.WriteFile(slack, bytes.Repeat([]byte("s"), slackPages*4096), 0o644); err != nil {
		t.Fatal(err)
	}
	fillUp(t, filepath.Join(v1, "fill"))
	if err := os.Remove(slack); err != nil {
		t.Fatal(err)
	}
	prepareOnFullDisk(t, root, big)
}

// fillUp writes name until the file system is full.
func fillUp(t *testing.T, name string) {
	t.Helper()
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			return
		}
	}
}

// prepareOnFullDisk prepares v3 (Keep 2) at the first attempt, with v1
// removed, v2 (the source) kept and v3 a copy of it.
func prepareOnFullDisk(t *testing.T, root, big string) {
	t.Helper()
	dir, res, err := Prepare(context.Background(), root, inst(0, 3), Options{Logger: quiet, Keep: 2, Tenure: "task-3"})
	if err != nil {
		t.Fatalf("Prepare v3 on a full disk with v1 beyond retention: %v; versions %v", err, versionsOf(t, root, 0))
	}
	if !slices.Contains(res.Removed, Dir(root, inst(0, 1))) {
		t.Errorf("Removed = %v, want it to list v1", res.Removed)
	}
	if got, want := versionsOf(t, root, 0), []string{"v2", "v3"}; !slices.Equal(got, want) {
		t.Errorf("versions %v, want %v", got, want)
	}
	equalMaps(t, contents(t, dir), map[string]string{"a": big})
	equalMaps(t, contents(t, Dir(root, inst(0, 2))), map[string]string{"a": big})
}

// A crash while garbage collection removes a valid version (its marker
// renamed to removingName, part of its files gone) leaves a directory that
// is never a source and that the next preparation removes as ours.
func TestCrashWhileRemovingAValidVersionLeavesItOurs(t *testing.T) {
	root := t.TempDir()
	makeVersion(t, root, 0, 1, map[string]string{"a": "v1"}, 1)
	v2 := makeVersion(t, root, 0, 2, map[string]string{"a": "v2", "b": "v2"}, 2)
	if err := os.Rename(filepath.Join(v2, MarkerName), filepath.Join(v2, removingName)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(v2, "b")); err != nil {
		t.Fatal(err)
	}
	dir, res := mustPrepare(t, root, inst(0, 3), Options{Keep: 5})
	if res.Source != 1 {
		t.Errorf("source %d, want 1: a directory being removed is not valid", res.Source)
	}
	equalMaps(t, contents(t, dir), map[string]string{"a": "v1"})
	if got, want := versionsOf(t, root, 0), []string{"v1", "v3"}; !slices.Equal(got, want) {
		t.Errorf("versions %v, want %v: the torn v2 is ours to remove", got, want)
	}
}
