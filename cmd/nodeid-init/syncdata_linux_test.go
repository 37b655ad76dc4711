package main

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Issue 24.7: syncData flushes the file system of the data directory
// before a release lets a successor hard-link its files. A symlink swapped
// in for node-N/vK (to a directory on another file system: syncfs would
// flush that one) must not be followed; a symlink in the root's own path,
// the operator's, still is.
func TestSyncDataDoesNotFollowASwappedInSymlink(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	elsewhere := filepath.Join(base, "elsewhere")
	for _, d := range []string{filepath.Join(root, "node-0", "v1"), filepath.Join(elsewhere, "v2"), filepath.Join(elsewhere, "node-1")} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	if err := syncData(filepath.Join(root, "node-0", "v1")); err != nil {
		t.Errorf("a real data directory: %v", err)
	}
	link := filepath.Join(base, "root-link")
	if err := os.Symlink(root, link); err != nil {
		t.Fatal(err)
	}
	if err := syncData(filepath.Join(link, "node-0", "v1")); err != nil {
		t.Errorf("through a symlinked root: %v", err)
	}
	if err := os.Symlink(filepath.Join(elsewhere, "v2"), filepath.Join(root, "node-0", "v2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(elsewhere, "node-1"), filepath.Join(root, "node-1")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(elsewhere, "node-1", "v1"), 0o750); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(root, "node-0", "v2"), filepath.Join(root, "node-1", "v1")} {
		err := syncData(dir)
		if !errors.Is(err, syscall.ELOOP) && !errors.Is(err, syscall.ENOTDIR) {
			t.Errorf("syncData(%s), a symlink in place: err = %v, want it refused (ELOOP or ENOTDIR)", dir, err)
		}
	}
}
