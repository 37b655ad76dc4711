//go:build linux

package efsfs

import (
	"os"
	"path/filepath"
	"testing"
)

// MountT mounts a fresh latency file system with profile p for the test,
// over a new directory, and unmounts it at the end. Where FUSE cannot be
// mounted it skips the test, saying why, except under CI=true (CI runs as
// root with /dev/fuse), where that is a failure.
func MountT(t testing.TB, p Profile) *FS {
	t.Helper()
	skip := func(why error) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("efsfs: cannot mount FUSE under CI=true: %v", why)
		}
		t.Skipf("SKIPPED, no EFS-like FUSE mount here: %v (runs as root with /dev/fuse, and always under CI=true)", why)
	}
	if err := Available(); err != nil {
		skip(err)
	}
	base := t.TempDir()
	backing, mnt := filepath.Join(base, "backing"), filepath.Join(base, "mnt")
	for _, d := range []string{backing, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f, err := Mount(backing, mnt, p)
	if err != nil {
		skip(err)
	}
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil {
			t.Errorf("efsfs: unmount %s: %v", mnt, err)
		}
	})
	return f
}
