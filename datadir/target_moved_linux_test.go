package datadir

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Issue 24.4: a target renamed out of the data root between the check
// before its marker's publication and the one right after is not reported
// as prepared, and keeps no marker where it went.
func TestTargetMovedRightAfterItsMarkerIsNotReported(t *testing.T) {
	dir := t.TempDir()
	root, outside := filepath.Join(dir, "root"), filepath.Join(dir, "outside")
	for _, d := range []string{root, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	makeVersion(t, root, 0, 1, map[string]string{"d/f": "data"}, 1)
	target := Dir(root, inst(0, 2))
	moved := filepath.Join(outside, "moved")
	setHook(t, &testHookAfterPublish, func(string) {
		if err := os.Rename(target, moved); err != nil {
			t.Error(err)
		}
	})
	got, _, err := Prepare(context.Background(), root, inst(0, 2), Options{Logger: quiet})
	testHookAfterPublish = nil
	if _, serr := os.Stat(moved); serr != nil {
		t.Fatalf("setup: the hook did not move the target: %v", serr)
	}
	if err == nil || !errors.Is(err, ErrValidation) {
		t.Fatalf("Prepare of a target moved away right after its marker: %q, %v; want ErrValidation", got, err)
	}
	if _, serr := os.Lstat(filepath.Join(moved, MarkerName)); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("the moved target keeps a marker: %v", serr)
	}
	if _, serr := os.Lstat(filepath.Join(moved, PreparingName)); serr != nil {
		t.Errorf("the moved target lost its in-progress file (it must stay recognisably unfinished): %v", serr)
	}
}
