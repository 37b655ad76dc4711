package datadir

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodeid/nodeid/nodeid"
)

// mountIn mounts a tmpfs (src "") or binds src at dir, which it creates,
// and writes files there; unmounted at the end of the test.
func mountIn(t *testing.T, dir, src string, files map[string]string) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root to mount")
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	var err error
	if src == "" {
		err = unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m")
	} else {
		err = unix.Mount(src, dir, "", unix.MS_BIND, "")
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mount at %s: %v", dir, err)
		}
		t.Skipf("mounting is not permitted here (%v)", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	writeFiles(t, dir, files)
}

// Issue 24.1: a file system mounted inside an old version, or on it, is
// not ours: garbage collection and the removal of leftovers before the copy
// leave every file on it (and its directories' modes) as they were, write
// nothing into it, and count it.
func TestGCDoesNotCrossMountPoints(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		viaCollect, noMounts bool
	}{
		{"Prepare", false, false},
		{"Collect", true, false},
		// Without the mount table only the statx of each directory
		// guards: the removal of v0 and v1 stops at their mounts.
		{"Prepare without mountinfo", false, true},
	} {
		viaCollect := tc.viaCollect
		t.Run(tc.name, func(t *testing.T) {
			if tc.noMounts {
				old := mountTable
				mountTable = "/nonexistent"
				t.Cleanup(func() { mountTable = old })
			}
			root := t.TempDir()
			onMount := map[string]string{"keep-me": "foreign", "sub/deep": "foreign too"}
			// v0: our leftover, a tmpfs at v0/cache (removed before the copy).
			v0 := makeVersion(t, root, 0, 0, map[string]string{"a": "0"}, -1)
			writePreparing(t, v0, 0, Cluster{})
			mountIn(t, filepath.Join(v0, "cache"), "", onMount)
			// v1: valid, a bind mount of a directory of the same file system.
			v1 := makeVersion(t, root, 0, 1, map[string]string{"a": "1"}, 1)
			elsewhere := t.TempDir()
			mountIn(t, filepath.Join(v1, "data"), elsewhere, onMount)
			// v2: valid, a tmpfs mounted on v2 itself.
			v2 := Dir(root, inst(0, 2))
			mountIn(t, v2, "", onMount)
			makeVersion(t, root, 0, 2, map[string]string{"a": "2"}, 2)
			if err := os.Chmod(filepath.Join(v2, "sub"), 0o500); err != nil {
				t.Fatal(err)
			}
			makeVersion(t, root, 0, 3, map[string]string{"a": "3"}, 3)
			// Without the mount table v0 and v1 are met at their mounts
			// while being emptied: left under their garbage names, never
			// renamed back into the versions (a late marker in them must
			// not vouch for what is left).
			g0, g1 := v0, v1
			if tc.noMounts {
				g0, g1 = garbagePathOf(t, v0, 0), garbagePathOf(t, v1, 1)
				t.Cleanup(func() {
					unix.Unmount(filepath.Join(g0, "cache"), unix.MNT_DETACH)
					unix.Unmount(filepath.Join(g1, "data"), unix.MNT_DETACH)
				})
			}

			opts := Options{Logger: quiet, Keep: 2, Tenure: "task-4"}
			if viaCollect {
				makeVersion(t, root, 0, 4, map[string]string{"a": "3"}, 4)
				if _, err := Collect(context.Background(), root, inst(0, 4), opts); err != nil {
					t.Fatalf("Collect: %v", err)
				}
			} else {
				_, res := mustPrepare(t, root, inst(0, 4), opts)
				if res.MountPoints != 3 {
					t.Errorf("Result.MountPoints = %d, want 3", res.MountPoints)
				}
			}
			for _, d := range []string{filepath.Join(g0, "cache"), filepath.Join(g1, "data"), v2} {
				for name, want := range onMount {
					b, err := os.ReadFile(filepath.Join(d, name))
					if err != nil || string(b) != want {
						t.Errorf("%s/%s: %q, %v; want %q: a file on a mount was removed", d, name, b, err, want)
					}
				}
			}
			if got := readFileOr(filepath.Join(v2, "a")); got != "2" {
				t.Errorf("v2/a = %q, want it kept (v2 is a mount point)", got)
			}
			if exists(t, filepath.Join(v2, PreparingName)) {
				t.Errorf("%s written into the file system mounted at v2", PreparingName)
			}
			if !exists(t, filepath.Join(v2, MarkerName)) {
				t.Errorf("the marker of v2 (a mount point) was removed")
			}
			if fi, err := os.Stat(filepath.Join(v2, "sub")); err != nil {
				t.Errorf("v2/sub: %v", err)
			} else if fi.Mode().Perm() != 0o500 {
				t.Errorf("v2/sub: mode %v, want 0500 unchanged", fi.Mode().Perm())
			}
			// A version holding a mount is left whole, as it was.
			for _, f := range []string{filepath.Join(v0, "a"), filepath.Join(v0, PreparingName), filepath.Join(v1, "a"), filepath.Join(v1, MarkerName)} {
				if !tc.noMounts && !exists(t, f) {
					t.Errorf("%s was removed from a version holding a mount point", f)
				}
			}
			if exists(t, filepath.Join(v1, PreparingName)) {
				t.Errorf("%s written into v1, which holds a mount point", PreparingName)
			}
			got := versionsOf(t, root, 0)
			if !slices.Contains(got, "v2") || !slices.Contains(got, filepath.Base(g1)) || !slices.Contains(got, filepath.Base(g0)) {
				t.Errorf("versions %v: the mount points v2, %s and %s must stay", got, filepath.Base(g1), filepath.Base(g0))
			}
			if tc.noMounts && (slices.Contains(got, "v0") || slices.Contains(got, "v1")) {
				t.Errorf("versions %v: v0 and v1, half emptied, are back in the versions", got)
			}
		})
	}
}

// garbagePathOf is the garbage name the directory dir of version v gets
// when its removal starts.
func garbagePathOf(t *testing.T, dir string, v nodeid.Version) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(filepath.Dir(dir), garbageName(v, st.Ino))
}

func readFileOr(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
