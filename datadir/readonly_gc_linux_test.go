package datadir

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// Old versions with read-only or inaccessible subdirectories (and a
// read-only top) are collected as an unprivileged user: removal makes the
// directories it removes writable first (issue 19, item 3).
func TestReadOnlySubdirectoriesAreCollected(t *testing.T) {
	dir, ok := nobodyDir(t)
	if !ok {
		asNobody(t, "TestReadOnlySubdirectoriesAreCollected")
		return
	}
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	// v3's copy keeps the read-only directory: let TempDir's cleanup in.
	t.Cleanup(func() {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				os.Chmod(p, 0o755)
			}
			return nil
		})
	})
	v1 := makeVersion(t, root, 0, 1, map[string]string{"ro/a": "1", "zero/sub/b": "2"}, 1)
	v2 := makeVersion(t, root, 0, 2, map[string]string{"ro/a": "1", "ro/deeper/c": "3"}, 2)
	for _, c := range []struct {
		p    string
		mode os.FileMode
	}{
		{filepath.Join(v1, "ro"), 0o555},
		{filepath.Join(v1, "zero", "sub"), 0o500},
		{filepath.Join(v1, "zero"), 0},
		{v1, 0o555},
		{filepath.Join(v2, "ro", "deeper"), 0o555},
		{filepath.Join(v2, "ro"), 0o555},
	} {
		if err := os.Chmod(c.p, c.mode); err != nil {
			t.Fatal(err)
		}
	}
	mustPrepare(t, root, inst(0, 3), Options{Keep: 3})
	removed, err := Collect(context.Background(), root, inst(0, 3), Options{Keep: 1, Logger: quiet})
	if err != nil {
		t.Fatalf("Collect: %v (removed %v)", err, removed)
	}
	if got := versionsOf(t, root, 0); len(got) != 1 || got[0] != "v3" {
		t.Fatalf("versions left: %v, want [v3]", got)
	}
}
