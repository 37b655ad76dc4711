package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Issue 24.7: syncData flushes the file system of the data directory
// before a release lets a successor hard-link its files. A symlink swapped
// in for node-N/vK (to a directory on another file system: syncfs would
// flush that one) must not be followed; a symlink in the root's own path,
// the operator's, still is.
func TestSyncDataDoesNotFollowASwappedInSymlink(t *testing.T) {
	syncData := syncDataAt
	base := t.TempDir()
	root := filepath.Join(base, "root")
	elsewhere := filepath.Join(base, "elsewhere")
	for _, d := range []string{filepath.Join(root, "node-0", "v1"), filepath.Join(elsewhere, "v2"), filepath.Join(elsewhere, "node-1")} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	if err := syncData(filepath.Join(root, "node-0", "v1")); err != nil {
		t.Errorf("a real data directory: %v", err)
	}
	link := filepath.Join(base, "root-link")
	if err := os.Symlink(root, link); err != nil {
		t.Fatal(err)
	}
	if err := syncData(filepath.Join(link, "node-0", "v1")); err != nil {
		t.Errorf("through a symlinked root: %v", err)
	}
	if err := os.Symlink(filepath.Join(elsewhere, "v2"), filepath.Join(root, "node-0", "v2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(elsewhere, "node-1"), filepath.Join(root, "node-1")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(elsewhere, "node-1", "v1"), 0o750); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(root, "node-0", "v2"), filepath.Join(root, "node-1", "v1")} {
		err := syncData(dir)
		if !errors.Is(err, syscall.ELOOP) && !errors.Is(err, syscall.ENOTDIR) {
			t.Errorf("syncData(%s), a symlink in place: err = %v, want it refused (ELOOP or ENOTDIR)", dir, err)
		}
	}
}

// syncDataAt opens dir as the stop sequence's descriptor is opened, and
// syncfs's through it.
func syncDataAt(dir string) error {
	f, err := openDataDir(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return syncData(f)
}

// The stop sequence's syncfs is to report write-back errors before a
// graceful release lets the successor hard-link the files. syncfs reports
// only errors its descriptor has not seen (errseq, Linux 5.8): an error of
// the super block already seen by another syncfs (another node's stop
// sequence or Prepare on the same EFS mount: NFS shares the super block) is
// reported to none opened later. So the descriptor is opened when the
// tenure starts (openDataDirBounded), before the broker writes; opened at
// stop, the broker's lost writes would go unnoticed, the lease released as
// graceful, and the successor would link the torn files.
//
// An ext4 image on a loop device backed by a 12 MiB tmpfs: writing back
// 30 MiB of a file fails (EIO/ENOSPC from the loop device).
func TestSyncDataReportsAWriteBackErrorAnotherSyncfsSawFirst(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root")
	}
	base := t.TempDir()
	tm, mnt := filepath.Join(base, "tm"), filepath.Join(base, "mnt")
	for _, d := range []string{tm, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount("tmpfs", tm, "tmpfs", 0, "size=12m"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(tm, unix.MNT_DETACH) })
	img := filepath.Join(tm, "disk.img")
	run := func(name string, args ...string) string {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Skipf("%s %v: %v\n%s", name, args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run("truncate", "-s", "64M", img)
	run("mkfs.ext4", "-q", "-F", img)
	dev := run("losetup", "-f", "--show", img)
	t.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })
	if err := unix.Mount(dev, mnt, "ext4", 0, ""); err != nil {
		t.Skipf("mount %s: %v", dev, err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	ours, other := filepath.Join(mnt, "node-0", "v1"), filepath.Join(mnt, "node-1", "v1")
	for _, d := range []string{ours, other} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	// Opened as run opens it: after the preparation, before the command.
	held, err := openDataDir(ours)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	// Our broker's write, not fsynced by it; write-back fails.
	if err := os.WriteFile(filepath.Join(ours, "journal"), bytes.Repeat([]byte("x"), 30<<20), 0o640); err != nil {
		t.Fatal(err)
	}
	unix.Sync() // the kernel's flusher, which does this on its own after 30 s
	// Another node's stop sequence on the same file system.
	errOther := syncDataAt(other)
	t.Logf("the other node's syncData: %v", errOther)
	if err := syncData(held); err == nil {
		t.Fatalf("syncData of our data directory: nil after its write-back failed (another syncfs saw the error first, %v); the lease would be released as graceful", errOther)
	}
}
