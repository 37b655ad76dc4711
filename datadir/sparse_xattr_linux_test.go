package datadir

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// A copied sparse file keeps its holes (issue 19, item 4): a 16 MiB file
// with 8 KiB of data, in the middle and none at the end, stays a few
// blocks, with the same size and content.
func TestSparseFilesStaySparse(t *testing.T) {
	root := t.TempDir()
	src := makeVersion(t, root, 0, 1, nil, 1)
	p := filepath.Join(src, "sparse")
	f := createSparse(t, p)
	f.Close()
	var sst syscall.Stat_t
	if err := syscall.Stat(p, &sst); err != nil {
		t.Fatal(err)
	}
	if sst.Blocks*512 >= 1<<20 {
		t.Skipf("the source is not sparse on this file system (%d bytes allocated)", sst.Blocks*512)
	}
	dir, res := mustPrepare(t, root, inst(0, 2), Options{VerifyContent: true})
	if res.FilesCopied != 1 {
		t.Fatalf("FilesCopied = %d, want 1", res.FilesCopied)
	}
	var dst syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, "sparse"), &dst); err != nil {
		t.Fatal(err)
	}
	if dst.Size != 16<<20 {
		t.Errorf("size %d, want %d", dst.Size, 16<<20)
	}
	if dst.Blocks > sst.Blocks {
		t.Errorf("copy has %d bytes allocated, the source %d: holes filled", dst.Blocks*512, sst.Blocks*512)
	}
}

// A copied file keeps its user.* extended attributes (issue 19, item 4).
func TestUserXattrsAreCopied(t *testing.T) {
	root := t.TempDir()
	src := makeVersion(t, root, 0, 1, map[string]string{"a": "1"}, 1)
	p := filepath.Join(src, "a")
	if err := unix.Setxattr(p, "user.nodeid.test", []byte("value"), 0); err != nil {
		t.Skipf("no user xattrs here: %v", err)
	}
	dir, res := mustPrepare(t, root, inst(0, 2), Options{})
	if res.FilesCopied != 1 {
		t.Fatalf("FilesCopied = %d, want 1", res.FilesCopied)
	}
	buf := make([]byte, 64)
	n, err := unix.Getxattr(filepath.Join(dir, "a"), "user.nodeid.test", buf)
	if err != nil || string(buf[:n]) != "value" {
		t.Errorf("user.nodeid.test on the copy = %q, %v; want \"value\"", buf[:max(n, 0)], err)
	}
}

// createSparse creates path as a 16 MiB file holding 4 KiB of data at 0
// and at 8 MiB, holes elsewhere, and returns it open.
func createSparse(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("d"), 4096)
	for _, off := range []int64{0, 8 << 20} {
		if _, err := f.WriteAt(data, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(16 << 20); err != nil {
		t.Fatal(err)
	}
	return f
}

// Review rev18, break 2 (docs: "A regular file is copied segment by segment,
// keeping its holes"). The new shortcut in copyData treats a file as
// without holes when st_blocks*512 >= st_size. Blocks preallocated past
// EOF (fallocate FALLOC_FL_KEEP_SIZE, as RocksDB and journal writers do,
// or XFS speculative preallocation) make a sparse file pass that test; it
// is then copied whole: every hole becomes allocated zeros in the copy (a
// 16 MiB file with 8 KiB of data costs 16 MiB in the target, which can
// turn a preparation that fits into ENOSPC). Content is equal.
func TestRev18SparseFileWithPreallocationIsCopiedDense(t *testing.T) {
	root := t.TempDir()
	src := makeVersion(t, root, 0, 1, nil, 1)
	p := filepath.Join(src, "sparse")
	f := createSparse(t, p)
	// Preallocated, past the end: the size stays 16 MiB.
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 16<<20, 16<<20); err != nil {
		t.Skipf("fallocate KEEP_SIZE: %v", err)
	}
	hole, err := unix.Seek(int(f.Fd()), 0, unix.SEEK_HOLE)
	f.Close()
	if err != nil || hole != 4096 {
		t.Skipf("source has no hole at 4096 on this file system (%d, %v)", hole, err)
	}
	dir, _ := mustPrepare(t, root, inst(0, 2), Options{VerifyContent: true})
	var dst syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, "sparse"), &dst); err != nil {
		t.Fatal(err)
	}
	g, err := os.Open(filepath.Join(dir, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	dhole, _ := unix.Seek(int(g.Fd()), 0, unix.SEEK_HOLE)
	if dst.Blocks*512 > 1<<20 || dhole != 4096 {
		t.Errorf("the copy of a file with 8 KiB of data in 16 MiB has %d bytes allocated and its first hole at %d (source: 4096): holes filled",
			dst.Blocks*512, dhole)
	}
}
