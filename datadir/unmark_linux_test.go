package datadir

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Issue 24.7: the check of the target after the marker fails (here a copied
// file deleted, as another provider's GC would) and the marker cannot be
// removed (here the directory made immutable: unlink fails with EPERM). On
// main that left a valid marker over a torn copy, which the next version
// would copy from. The marker must never be in place over a copy that
// failed the check.
func TestFailedCheckNeverLeavesAValidMarker(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root for chattr +i")
	}
	root := t.TempDir()
	makeVersion(t, root, 0, 1, map[string]string{"a": "1", "b": "2"}, 1)
	target := Dir(root, inst(0, 2))
	setHook(t, &testHookAfterMarker, func(dir string) {
		if err := os.Remove(filepath.Join(dir, "a")); err != nil {
			t.Fatal(err)
		}
		if err := setInodeFlags(dir, fsImmutableFL); err != nil {
			t.Skipf("chattr +i: %v", err)
		}
	})
	t.Cleanup(func() { _ = setInodeFlags(target, 0) })
	_, _, err := Prepare(context.Background(), root, inst(0, 2), Options{Logger: quiet, Tenure: "task-2"})
	if !errors.Is(err, ErrValidation) {
		t.Fatalf("err = %v, want ErrValidation", err)
	}
	if err := setInodeFlags(target, 0); err != nil {
		t.Fatal(err)
	}
	if exists(t, filepath.Join(target, MarkerName)) {
		t.Fatal("a marker is in place over a copy that failed the check")
	}
	testHookAfterMarker = nil
	// The next version starts from v1, and v2 (our leftover) goes.
	dir, res := mustPrepare(t, root, inst(0, 3), Options{Logger: quiet, Tenure: "task-3"})
	if !res.HasSource || res.Source != 1 {
		t.Errorf("source = %v (has %v), want v1", res.Source, res.HasSource)
	}
	equalMaps(t, contents(t, dir), map[string]string{"a": "1", "b": "2"})
	if exists(t, target) {
		t.Errorf("%s (our leftover) stayed", target)
	}
}
