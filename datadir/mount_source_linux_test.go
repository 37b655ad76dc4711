package datadir

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Regression (review): a mount inside the source version (here a bind mount
// of a directory outside the data root). The copy walks into it: after a
// graceful release every file is hard-linked, and linkat across mounts is
// EXDEV, on every attempt; after an ungraceful one its content is copied
// into the new version (cp -a does that too, without -x).
func TestMountInsideSourceIsCopiedAfterAGracefulRelease(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root")
	}
	for _, graceful := range []bool{true, false} {
		root := t.TempDir()
		outside := t.TempDir()
		writeFiles(t, outside, map[string]string{"secret": "s"})
		v1 := makeVersion(t, root, 0, 1, map[string]string{"a": "a", "m/.keep": ""}, 1)
		os.Remove(filepath.Join(v1, "m/.keep"))
		if err := syscall.Mount(outside, filepath.Join(v1, "m"), "", syscall.MS_BIND, ""); err != nil {
			t.Skip(err)
		}
		t.Cleanup(func() { syscall.Unmount(filepath.Join(v1, "m"), syscall.MNT_DETACH) })
		var errs int
		for i := range 2 {
			dir, _, err := Prepare(context.Background(), root, inst(0, 2), Options{Logger: quiet, PreviousGraceful: graceful, Tenure: "t"})
			t.Logf("graceful %v attempt %d: err = %v", graceful, i, err)
			if err != nil {
				errs++
			}
			if err == nil {
				_, serr := os.Stat(filepath.Join(dir, "m", "secret"))
				t.Logf("graceful %v: copied the mounted file into %s: %v", graceful, dir, serr == nil)
				break
			}
		}
		if graceful && errs == 2 {
			t.Errorf("after a graceful release, a mount inside the source fails every preparation (EXDEV); giveBack(false) releases gracefully again, so every successor links again")
		}
	}
}
