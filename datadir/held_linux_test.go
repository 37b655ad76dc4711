package datadir

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Issue 24.7: copying a tree with a multi-name file in each of many
// directories held one duplicated directory descriptor per such directory
// until the end of the copy, so a large tree ran out of descriptors
// (EMFILE). With the limit lowered to 128, 400 of them must copy.
func TestManyMultiNameCopiesDoNotExhaustDescriptors(t *testing.T) {
	root := t.TempDir()
	const dirs = 400
	files := map[string]string{}
	for i := range dirs {
		files[fmt.Sprintf("d%03d/a", i)] = "x"
	}
	src := makeVersion(t, root, 0, 1, files, 1)
	for i := range dirs {
		d := filepath.Join(src, fmt.Sprintf("d%03d", i))
		if err := os.Link(filepath.Join(d, "a"), filepath.Join(d, "b")); err != nil {
			t.Fatal(err)
		}
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	low := old
	low.Cur = 128
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	dir, res, err := Prepare(t.Context(), root, inst(0, 2), Options{Logger: quiet, Workers: 4})
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatalf("Prepare with RLIMIT_NOFILE 128: %v", err)
	}
	if res.FilesCopied != 2*dirs {
		t.Errorf("FilesCopied = %d, want %d", res.FilesCopied, 2*dirs)
	}
	for _, i := range []int{0, dirs / 2, dirs - 1} {
		d := filepath.Join(dir, fmt.Sprintf("d%03d", i))
		a, err1 := os.Stat(filepath.Join(d, "a"))
		b, err2 := os.Stat(filepath.Join(d, "b"))
		if err1 != nil || err2 != nil || !os.SameFile(a, b) {
			t.Errorf("%s: a and b are not one copied file (%v, %v)", d, err1, err2)
		}
	}
}
