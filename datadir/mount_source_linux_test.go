package datadir

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// Regression (review): a mount inside the source version (a bind mount of
// a directory outside the data root, or another file system). The copy
// walks into it, as cp -a without -x does. After a graceful release every
// file is hard-linked, and linkat across mounts is EXDEV, on every attempt:
// nodeid-init releases gracefully again, so every successor failed the same
// way. The mounted files are now copied, as after an ungraceful takeover;
// the rest is still linked.
func TestMountInsideSourceIsCopiedAfterAGracefulRelease(t *testing.T) {
	for _, tc := range []struct {
		name, src string
	}{{"bind", "outside"}, {"tmpfs", ""}} {
		for _, graceful := range []bool{true, false} {
			root := t.TempDir()
			v1 := makeVersion(t, root, 0, 1, map[string]string{"a": "a"}, 1)
			src := tc.src
			if src != "" {
				src = t.TempDir()
			}
			mountIn(t, filepath.Join(v1, "m"), src, map[string]string{"secret": "s", "sub/f": "f"})
			dir, res, err := Prepare(context.Background(), root, inst(0, 2), Options{Logger: quiet, PreviousGraceful: graceful, Tenure: "t"})
			if err != nil {
				t.Fatalf("%s, graceful %v: Prepare: %v", tc.name, graceful, err)
			}
			for rel, want := range map[string]string{"a": "a", "m/secret": "s", "m/sub/f": "f"} {
				b, err := os.ReadFile(filepath.Join(dir, rel))
				if err != nil || string(b) != want {
					t.Errorf("%s, graceful %v: %s = %q, %v; want %q", tc.name, graceful, rel, b, err, want)
				}
			}
			if sameFile(t, filepath.Join(v1, "m/secret"), filepath.Join(dir, "m/secret")) {
				t.Errorf("%s, graceful %v: m/secret shares its inode with the mounted source", tc.name, graceful)
			}
			if linked := sameFile(t, filepath.Join(v1, "a"), filepath.Join(dir, "a")); linked != graceful {
				t.Errorf("%s, graceful %v: a linked = %v", tc.name, graceful, linked)
			}
			if graceful && (res.FilesLinked != 1 || res.FilesCopied != 2) {
				t.Errorf("%s: linked %d, copied %d; want 1 and 2", tc.name, res.FilesLinked, res.FilesCopied)
			}
		}
	}
}

func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	fa, err := os.Stat(a)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := os.Stat(b)
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(fa, fb)
}
