package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Review rev24 (invariant 3: a successor built from an incomplete
// version). The stop sequence's syncfs is to report write-back errors
// before a graceful release lets the successor hard-link the files. It
// opens the data directory just then, and syncfs reports only errors its
// descriptor has not seen: an error of the super block already seen by
// another syncfs (another node's stop sequence or Prepare on the same
// EFS mount: NFS shares the super block) is reported to none opened
// later. So the broker's lost writes go unnoticed, the lease is released
// as graceful, and the successor links the torn files.
//
// An ext4 image on a loop device backed by a 12 MiB tmpfs: writing back
// 30 MiB of a file fails (EIO/ENOSPC from the loop device).
func TestReviewRev24WriteBackErrorSeenByAnotherSyncfsIsReported(t *testing.T) {
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
	// Our broker's write, not fsynced by it; write-back fails.
	if err := os.WriteFile(filepath.Join(ours, "journal"), bytes.Repeat([]byte("x"), 30<<20), 0o640); err != nil {
		t.Fatal(err)
	}
	unix.Sync() // the kernel's flusher, which does this on its own after 30 s
	// Another node's stop sequence on the same file system.
	errOther := syncData(other)
	t.Logf("the other node's syncData: %v", errOther)
	if err := syncData(ours); err == nil {
		t.Fatalf("syncData of our data directory: nil after its write-back failed (another syncfs saw the error first, %v); the lease would be released as graceful", errOther)
	}
}
