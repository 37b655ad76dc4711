package datadir

import (
	"context"
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
