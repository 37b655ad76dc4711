package datadir

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const mountRaceChildEnv = "DATADIR_REV_MOUNT_RACE_ROOT"

// Review (rev-datadir), invariants 3 and 5: "a removal never crosses a
// mount point: before it opens, changes or writes into a directory it
// compares that directory's device and mount ID with its parent's". The
// comparison is made on the name (statx), the open is by name afterwards
// (openDirForRemoval), and nothing checks that the directory opened is the
// one compared: a mount that arrives over the name in between is entered,
// and everything on it is deleted.
//
// Schedule: GC (Collect of v3, keep 1) removes the valid v1, which holds
// the directory sub. It renames v1's marker aside, checks v1/sub (same
// mount: fine). Then, before its openat of sub, a tmpfs holding someone
// else's file is mounted on v1/sub (strace delays the return of the child's
// statx calls on v1 by 1.5 s to open that window). GC opens sub (now the
// mount's root) and deletes the file on the other file system. The file
// must survive; it is deleted.
func TestGCNeverDeletesOnAMountThatArrivesAfterTheCheck(t *testing.T) {
	if root := os.Getenv(mountRaceChildEnv); root != "" {
		removed, err := Collect(context.Background(), root, inst(0, 3), Options{Keep: 1, Logger: quiet})
		fmt.Printf("GC-RESULT removed=%v err=%v\n", removed, err)
		os.Exit(0)
	}
	if os.Getuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("SKIPPED LOUDLY: needs strace")
	}
	root := t.TempDir()
	v1 := makeVersion(t, root, 0, 1, map[string]string{"sub/x": "ours"}, 1)
	makeVersion(t, root, 0, 2, map[string]string{"a": "b"}, 2)
	makeVersion(t, root, 0, 3, map[string]string{"a": "b"}, 3)
	// GC renames v1 out of the versions before it empties it (r24): the
	// removal, and so the window, is under its garbage name.
	var st syscall.Stat_t
	if err := syscall.Stat(v1, &st); err != nil {
		t.Fatal(err)
	}
	orig := v1
	v1 = filepath.Join(filepath.Dir(v1), garbageName(1, st.Ino))
	cmd := exec.Command(strace, "-f", "-qq", "-o", "/dev/null", "-P", v1,
		"-e", "trace=statx", "-e", "inject=statx:delay_exit=1500000",
		os.Args[0], "-test.run=^TestGCNeverDeletesOnAMountThatArrivesAfterTheCheck$", "-test.count=1")
	cmd.Env = append(os.Environ(), mountRaceChildEnv+"="+root)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	awaitPath(t, cmd, &out, filepath.Join(v1, removingName), "renamed the marker of")
	// GC is in statx(v1, "") (pm), then statx(v1, "sub") (the check),
	// each returning 1.5 s late: mount once the check has run.
	time.Sleep(2200 * time.Millisecond)
	sub := filepath.Join(v1, "sub")
	if err := syscall.Mount("tmpfs", sub, "tmpfs", 0, "size=1m"); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Skipf("mount tmpfs: %v", err)
	}
	defer syscall.Unmount(sub, syscall.MNT_DETACH)
	precious := filepath.Join(sub, "not-ours")
	if err := os.WriteFile(precious, []byte("another file system's data"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	t.Logf("child: %s", strings.TrimSpace(out.String()))
	// Stopped at the mount, v1 stays under its garbage name, with the
	// mount: never renamed back into the versions (r24b).
	if exists(t, orig) {
		t.Errorf("%s is back in the versions after its removal stopped at a mount", orig)
		defer syscall.Unmount(filepath.Join(orig, "sub"), syscall.MNT_DETACH)
		precious = filepath.Join(orig, "sub", "not-ours")
	}
	if !exists(t, precious) {
		t.Errorf("GC deleted %s, a file on a tmpfs mounted on v1/sub after its mount check (before its openat): it crossed a mount point", precious)
	}
}

const copyMountRaceChildEnv = "DATADIR_REV_COPY_MOUNT_RACE_ROOT"

// Review (rev-datadir), invariant 5 (no write outside the data root): the
// copy makes a target subdirectory with mkdirat and then opens it by name
// (openSubdir); nothing checks that what it opened is on the target's
// mount. A mount that arrives over the new directory in between receives
// the copy, and validation, which records the inode opened, passes it.
//
// Schedule: Prepare of v5 from v4 (which holds sub/x) makes v5/sub; strace
// delays the return of the child's mkdirat calls by 1.5 s; meanwhile a
// tmpfs (another file system, not ours) is mounted on v5/sub. Prepare opens
// v5/sub, now the tmpfs's root, and writes sub/x into it. Nothing may be
// written on it (Prepare must fail, writing nothing there); it is.
func TestCopyNeverWritesIntoAMountThatArrivesAfterItsMkdir(t *testing.T) {
	if root := os.Getenv(copyMountRaceChildEnv); root != "" {
		_, _, err := Prepare(context.Background(), root, inst(0, 5), Options{Logger: quiet})
		fmt.Printf("PREPARE-RESULT err=%v\n", err)
		os.Exit(0)
	}
	if os.Getuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("SKIPPED LOUDLY: needs strace")
	}
	root := t.TempDir()
	makeVersion(t, root, 0, 4, map[string]string{"sub/x": "ours"}, 4)
	cmd := exec.Command(strace, "-f", "-qq", "-o", "/dev/null",
		"-e", "trace=mkdirat", "-e", "inject=mkdirat:delay_exit=1500000",
		os.Args[0], "-test.run=^TestCopyNeverWritesIntoAMountThatArrivesAfterItsMkdir$", "-test.count=1")
	cmd.Env = append(os.Environ(), copyMountRaceChildEnv+"="+root)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(Dir(root, inst(0, 5)), "sub")
	awaitPath(t, cmd, &out, sub, "created")
	if err := syscall.Mount("tmpfs", sub, "tmpfs", 0, "size=1m"); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Skipf("mount tmpfs: %v", err)
	}
	defer syscall.Unmount(sub, syscall.MNT_DETACH)
	cmd.Wait()
	t.Logf("child: %s", strings.TrimSpace(out.String()))
	if names, _ := os.ReadDir(sub); len(names) > 0 {
		t.Errorf("Prepare wrote %v into a tmpfs mounted on v5/sub after its mkdirat: a write outside the data root (child: %s)",
			names, strings.TrimSpace(out.String()))
	}
}
