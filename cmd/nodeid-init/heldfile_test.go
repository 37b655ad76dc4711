package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A held file is replaced in the directory opened at start: the directory
// renamed away and a symlink put at its path does not redirect the write,
// and a final name that became a symlink is refused, its target untouched.
func TestHeldFileWritesInTheDirectoryOpenedAtStart(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "conf")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	h, err := openHeldFile("template destination", filepath.Join(dir, "out"), "")
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	if err := h.writeFile([]byte("one\n"), 0o640); err != nil {
		t.Fatal(err)
	}

	outside := t.TempDir()
	if err := os.Rename(dir, dir+".orig"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, dir); err != nil {
		t.Fatal(err)
	}
	if err := h.writeFile([]byte("two\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir+".orig", "out")); err != nil || string(b) != "two\n" {
		t.Errorf("held directory: %q, %v; want two", b, err)
	}
	if fi, err := os.Stat(filepath.Join(dir+".orig", "out")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("mode: %v, %v; want 0640", fi, err)
	}
	if es, _ := os.ReadDir(outside); len(es) != 0 {
		t.Errorf("wrote %d entries through the symlink, e.g. %s", len(es), es[0].Name())
	}

	// The final name itself becomes a symlink out of the directory.
	target := filepath.Join(outside, "victim")
	if err := os.WriteFile(target, []byte("theirs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	final := filepath.Join(dir+".orig", "out")
	if err := os.Remove(final); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, final); err != nil {
		t.Fatal(err)
	}
	if err := h.writeFile([]byte("three\n"), 0o644); !errors.Is(err, errNotRegularOutput) {
		t.Errorf("write over a symlink: %v, want errNotRegularOutput", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "theirs\n" {
		t.Errorf("symlink target now %q", b)
	}
	if fi, err := os.Lstat(final); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("final name: %v, %v; want the symlink left as it is", fi, err)
	}
	es, _ := os.ReadDir(dir + ".orig")
	if len(es) != 1 {
		t.Errorf("temporary files left: %v", es)
	}
}
