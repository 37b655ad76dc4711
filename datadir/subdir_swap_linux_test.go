package datadir

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Regression (review): openSubdir opened the directory it had just made by
// name, checking only that it was not a mount point. A same-uid tenant
// exchanging the name for its own directory in that window
// (renameat2 RENAME_EXCHANGE) had it recorded as made: the copy wrote into
// it, gave it the source's mode and times, and validation passed.
func TestSubdirSwappedAfterMkdirIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mode  os.FileMode
		files bool
	}{
		{"not empty", 0o700, true},
		{"other mode", 0o755, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			v1 := makeVersion(t, root, 0, 1, map[string]string{"a/f": "data"}, 1)
			if err := os.Chmod(filepath.Join(v1, "a"), 0o750); err != nil {
				t.Fatal(err)
			}
			tenant := filepath.Join(root, "tenant")
			if err := os.Mkdir(tenant, tc.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(tenant, tc.mode); err != nil {
				t.Fatal(err)
			}
			if tc.files {
				writeFiles(t, tenant, map[string]string{"mine": "tenant"})
			}
			held, err := os.Open(tenant)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Close()
			swapped := false
			testHookAfterSubdirMkdir = func(rel string) {
				if rel != "a" || swapped {
					return
				}
				swapped = true
				if err := unix.Renameat2(unix.AT_FDCWD, tenant, unix.AT_FDCWD, filepath.Join(Dir(root, inst(0, 2)), "a"), unix.RENAME_EXCHANGE); err != nil {
					t.Error(err)
				}
			}
			t.Cleanup(func() { testHookAfterSubdirMkdir = nil })

			_, _, err = Prepare(context.Background(), root, inst(0, 2), Options{Logger: quiet, Workers: 1})
			if !swapped {
				t.Fatal("the hook did not run")
			}
			if !errors.Is(err, ErrValidation) {
				t.Fatalf("Prepare with a subdirectory swapped after mkdirat: %v, want ErrValidation", err)
			}
			if _, err := os.Lstat(filepath.Join(Dir(root, inst(0, 2)), MarkerName)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("marker of the refused target: %v, want none", err)
			}
			var st unix.Stat_t
			if err := unix.Fstat(int(held.Fd()), &st); err != nil {
				t.Fatal(err)
			}
			if got := os.FileMode(st.Mode & 0o777); got != tc.mode {
				t.Errorf("the tenant's directory has mode %v, want %v (untouched)", got, tc.mode)
			}
			if _, err := unix.Openat(int(held.Fd()), "f", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
				t.Error("the source's file was written into the tenant's directory")
			}
		})
	}
}
