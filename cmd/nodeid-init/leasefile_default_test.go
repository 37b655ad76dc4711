package main

import (
	"os"
	"path/filepath"
	"testing"
)

// The default lease file must not sit at a predictable path of a shared
// /tmp, where another user could plant a file or a symlink beforehand.
func TestDefaultLeaseFileIsInANewPrivateDirectory(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	a, err := defaultLeaseFile()
	if err != nil {
		t.Fatal(err)
	}
	b, err := defaultLeaseFile()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(a) == tmp || filepath.Dir(filepath.Dir(a)) != tmp || filepath.Dir(a) == filepath.Dir(b) {
		t.Fatalf("lease files %s and %s: want each in its own new directory of %s", a, b, tmp)
	}
	fi, err := os.Stat(filepath.Dir(a))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o755 {
		t.Errorf("directory mode %v, want 0755", fi.Mode().Perm())
	}
	if _, err := os.Lstat(a); !os.IsNotExist(err) {
		t.Errorf("lease file exists before the first write: %v", err)
	}
}
