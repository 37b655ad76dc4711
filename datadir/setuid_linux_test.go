package datadir

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A setuid/setgid file of another user, copied (not linked), must not
// become a setuid/setgid file of the copier (issue 19, item 1). Copied by
// root, it keeps its owner and so its bits (issue 24.3; where the owner
// cannot be kept, see TestSetgidDirectoryOfAnotherUserLosesItsBits). A
// file of our own keeps its bits.
func TestSetuidDroppedWhenOwnerChanges(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to create a file of another user")
	}
	root := t.TempDir()
	src := makeVersion(t, root, 0, 1, map[string]string{"foreign": "x", "own": "y", "plain": "z"}, 1)
	for name, mode := range map[string]os.FileMode{"foreign": 0o755, "own": 0o755, "plain": 0o644} {
		if err := os.Chmod(filepath.Join(src, name), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(filepath.Join(src, "foreign"), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	// chown clears the bits; set them afterwards.
	for _, name := range []string{"foreign", "own"} {
		if err := syscall.Chmod(filepath.Join(src, name), 0o6755); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Chmod(filepath.Join(src, "plain"), 0o1644); err != nil {
		t.Fatal(err)
	}
	dir, res := mustPrepare(t, root, inst(0, 2), Options{}) // not graceful: copied
	if res.FilesCopied != 3 {
		t.Fatalf("FilesCopied = %d, want 3", res.FilesCopied)
	}
	for name, want := range map[string]uint32{"foreign": 0o6755, "own": 0o6755, "plain": 0o1644} {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dir, name), &st); err != nil {
			t.Fatal(err)
		}
		if got := st.Mode & 0o7777; got != want {
			t.Errorf("%s: mode %#o, want %#o (uid %d)", name, got, want, st.Uid)
		}
	}
}
