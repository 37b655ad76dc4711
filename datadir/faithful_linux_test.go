package datadir

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/efsfs"
)

// Issue 24: a copy as faithful as cp -a, and as current as validation can
// prove.

// writeStaleInPlace writes "STALE!!!" over the start of file through a
// descriptor of its own, keeping its size, as a stale holder does. It runs
// in a hook, so it reports with t.Error; false if file could not be opened.
func writeStaleInPlace(t *testing.T, file string) bool {
	t.Helper()
	f, err := os.OpenFile(file, os.O_WRONLY, 0)
	if err != nil {
		t.Error(err)
		return false
	}
	if _, err := f.WriteAt([]byte("STALE!!!"), 0); err != nil {
		t.Error(err)
	}
	f.Close()
	return true
}

// A stale holder writes a copied (not linked) file in place after its copy,
// before validation, keeping its size: as Zeebe writes its preallocated
// journal segments. Validation used to compare only sizes for copies, so
// the copy of the old content got a marker (issue 24.2).
func TestCopiedFileWrittenInPlaceBeforeValidationFails(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mtime   bool // set the mtime back after the write
		replace bool // rename a same-size file over the name instead
	}{
		{"same-size write", false, false},
		{"same-size write, mtime set back", true, false},
		{"replaced by a same-size file, mtime set back", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			rel := "raft-partition/partitions/1/journal-1.log"
			src := makeVersion(t, root, 0, 4, map[string]string{rel: "preallocated segment", "other": "x"}, 4)
			file := filepath.Join(src, rel)
			fi, err := os.Stat(file)
			if err != nil {
				t.Fatal(err)
			}
			hooked := false
			setHook(t, &testHookBeforeValidate, func(string) {
				hooked = true
				time.Sleep(20 * time.Millisecond) // past the time stamp granularity
				if tc.replace {
					tmp := filepath.Join(src, "tmp")
					if err := os.WriteFile(tmp, []byte("STALE!!!ALLOCATED!!!"), 0o644); err != nil {
						t.Error(err)
					}
					if err := os.Chtimes(tmp, fi.ModTime(), fi.ModTime()); err != nil {
						t.Error(err)
					}
					if err := os.Rename(tmp, file); err != nil {
						t.Error(err)
					}
					return
				}
				if !writeStaleInPlace(t, file) {
					return
				}
				if tc.mtime {
					if err := os.Chtimes(file, fi.ModTime(), fi.ModTime()); err != nil {
						t.Error(err)
					}
				}
			})
			dir, _, err := Prepare(context.Background(), root, inst(0, 5), Options{Logger: quiet})
			if !hooked {
				t.Fatal("hook never ran")
			}
			if !errors.Is(err, ErrValidation) {
				b, _ := os.ReadFile(filepath.Join(dir, rel))
				t.Fatalf("err = %v, want ErrValidation: v5's copy holds %q, the source %q", err, b, mustRead(t, file))
			}
			if exists(t, filepath.Join(Dir(root, inst(0, 5)), MarkerName)) {
				t.Error("v5 got a marker")
			}
		})
	}
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Run as root, a copy keeps the owners and groups of the source, as cp -a
// does: a broker that runs as another user (here uid 65534) reads its own
// 0600 files and creates files in its 0700 directories after a takeover,
// ungraceful (copies) or graceful (links, and new directories). They used to
// be root's (issue 24.3). A setgid directory keeps its bit with its owner
// (issue 24.4).
func TestOwnersAreKeptWhenCopyingAsRoot(t *testing.T) {
	const name = "TestOwnersAreKeptWhenCopyingAsRoot"
	if dir := os.Getenv(childEnv); dir != "" {
		brokerUsesItsDirectories(t, filepath.Join(dir, "root"))
		return
	}
	if os.Getuid() != 0 {
		t.Skip("needs root to copy files of another user")
	}
	asNobody(t, name, func(work string) {
		root := filepath.Join(work, "root")
		files := map[string]string{"log/seg-1": "segment", "snapshots/1/a.sst": "snap", "top": "x"}
		v1 := makeVersion(t, root, 0, 1, files, 1)
		if err := os.Symlink("top", filepath.Join(v1, "current")); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(v1, "sgid"), 0o755); err != nil {
			t.Fatal(err)
		}
		chownTree(t, root, 65534, 65534)
		filepath.WalkDir(v1, func(p string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				t.Fatal(err)
			case d.Name() == "sgid":
				err = syscall.Chmod(p, 0o2777)
			case d.IsDir():
				err = os.Chmod(p, 0o700)
			case d.Type().IsRegular():
				err = os.Chmod(p, 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
			return nil
		})
		v2, _ := mustPrepare(t, root, inst(0, 2), Options{})                       // a crash: copies
		v3, _ := mustPrepare(t, root, inst(0, 3), Options{PreviousGraceful: true}) // links, new directories
		for _, v := range []string{v2, v3} {
			filepath.WalkDir(v, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					t.Fatal(err)
				}
				if d.Name() == MarkerName {
					return nil // ours, not a copy
				}
				var st syscall.Stat_t
				if err := syscall.Lstat(p, &st); err != nil {
					t.Fatal(err)
				}
				if st.Uid != 65534 || st.Gid != 65534 {
					t.Errorf("%s: owner %d:%d, want 65534:65534 as in the source", p, st.Uid, st.Gid)
				}
				want := map[bool]uint32{true: 0o700, false: 0o600}[d.IsDir()]
				switch {
				case p == v:
					want = 0o750 // DirMode
				case d.Name() == "sgid":
					want = 0o2777
				case d.Type()&fs.ModeSymlink != 0:
					return nil
				}
				if got := st.Mode & 0o7777; got != want {
					t.Errorf("%s: mode %#o, want %#o", p, got, want)
				}
				return nil
			})
		}
	})
}

// brokerUsesItsDirectories is the broker's part, as uid 65534: it reads
// every file of v2 and v3, the markers included (Camunda's provider, run
// as the broker's user, reads them), and creates a file in every directory.
func brokerUsesItsDirectories(t *testing.T, root string) {
	for _, v := range []string{Dir(root, inst(0, 2)), Dir(root, inst(0, 3))} {
		filepath.WalkDir(v, func(p string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				t.Errorf("as uid %d: %v", os.Getuid(), err)
			case d.IsDir():
				if err := os.WriteFile(filepath.Join(p, "broker-"+fmt.Sprint(time.Now().UnixNano())), nil, 0o600); err != nil {
					t.Errorf("as uid %d: %v", os.Getuid(), err)
				}
			case d.Type().IsRegular():
				if _, err := os.ReadFile(p); err != nil {
					t.Errorf("as uid %d: %v", os.Getuid(), err)
				}
			}
			return nil
		})
	}
}

func chownTree(t *testing.T, root string, uid, gid int) {
	t.Helper()
	if err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	}); err != nil {
		t.Fatal(err)
	}
}

// Where the owner cannot be kept (not root), a copy loses setuid and
// setgid: a setgid directory of another user must not become a setgid
// directory of the copier's group, nor a setuid program one of the
// copier's. Directories used to keep them (issue 24.4). Sticky is kept on a
// directory (it only restricts).
func TestSetgidDirectoryOfAnotherUserLosesItsBits(t *testing.T) {
	const name = "TestSetgidDirectoryOfAnotherUserLosesItsBits"
	if dir := os.Getenv(childEnv); dir != "" {
		root := filepath.Join(dir, "root")
		v2, _ := mustPrepare(t, root, inst(0, 2), Options{})
		for rel, want := range map[string]uint32{"sgid": 0o777, "sticky": 0o1777, "sgid/prog": 0o755, "own": 0o2770} {
			var st syscall.Stat_t
			if err := syscall.Lstat(filepath.Join(v2, rel), &st); err != nil {
				t.Fatal(err)
			}
			if got := st.Mode & 0o7777; got != want {
				t.Errorf("%s: mode %#o, want %#o (owner %d:%d)", rel, got, want, st.Uid, st.Gid)
			}
		}
		return
	}
	if os.Getuid() != 0 {
		t.Skip("needs root to make files of another user")
	}
	asNobody(t, name, func(work string) {
		root := filepath.Join(work, "root")
		v1 := makeVersion(t, root, 0, 1, map[string]string{"sgid/prog": "#!"}, 1)
		for _, d := range []string{"sticky", "own"} {
			if err := os.Mkdir(filepath.Join(v1, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		chownTree(t, root, 65534, 65534)
		// Root's, readable by all: the child copies them as uid 65534.
		for _, rel := range []string{"sgid", "sticky", "sgid/prog"} {
			if err := os.Lchown(filepath.Join(v1, rel), 0, 0); err != nil {
				t.Fatal(err)
			}
		}
		for rel, mode := range map[string]uint32{"sgid": 0o2777, "sticky": 0o1777, "sgid/prog": 0o4755, "own": 0o2770} {
			if err := syscall.Chmod(filepath.Join(v1, rel), mode); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// Times are set through the descriptor of the entry made, not by name: a
// name in the target swapped meanwhile (here a directory renamed away and
// a hard link to a file outside the version put in its place) must not
// have its times changed (issue 24.7).
func TestTimesAreNotSetThroughANameSwappedInTheTarget(t *testing.T) {
	root := t.TempDir()
	v1 := makeVersion(t, root, 0, 1, map[string]string{"d/f": "data"}, 1)
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(v1, "d"), old, old); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(root, "victim") // another file of the same file system
	if err := os.WriteFile(victim, []byte("v"), 0o644); err != nil {
		t.Fatal(err)
	}
	was := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	if err := os.Chtimes(victim, was, was); err != nil {
		t.Fatal(err)
	}
	target := Dir(root, inst(0, 2))
	swapped := false
	setHook(t, &testHookFile, func(rel string) {
		if rel != "d/f" {
			return
		}
		// d is made and open in the target; the copy goes on in it.
		if err := os.Rename(filepath.Join(target, "d"), filepath.Join(target, "d.moved")); err != nil {
			t.Error(err)
		}
		if err := os.Link(victim, filepath.Join(target, "d")); err != nil {
			t.Error(err)
		}
		swapped = true
	})
	_, _, err := Prepare(context.Background(), root, inst(0, 2), Options{Logger: quiet, Workers: 1})
	if !swapped {
		t.Fatal("hook never ran")
	}
	if !errors.Is(err, ErrValidation) {
		t.Errorf("err = %v, want ErrValidation", err)
	}
	fi, err := os.Stat(victim)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.ModTime().Equal(was) {
		t.Errorf("the file swapped in got the times of the source directory: mtime %v, was %v", fi.ModTime().UTC(), was)
	}
}

const utimesChildEnv = "DATADIR_UTIMES_BY_DESCRIPTOR_ROOT"

// No time, owner or mode of a copy is set by name: strace lists every
// utimensat, fchownat and fchmodat of a Prepare in copy mode with a
// directory, a file, a multi-name file and a symlink, run as root over
// files of uid 65534 (so that owners are set too). Each must be on a
// descriptor: a NULL or empty path (AT_EMPTY_PATH). Issue 24.7.
func TestTimesAndOwnersAreSetByDescriptor(t *testing.T) {
	if root := os.Getenv(utimesChildEnv); root != "" {
		_, _, err := Prepare(context.Background(), root, inst(0, 2), Options{Logger: quiet})
		fmt.Printf("CHILD-RESULT err=%v\n", err)
		os.Exit(0)
	}
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("SKIPPED LOUDLY: needs strace")
	}
	root := t.TempDir()
	v1 := makeVersion(t, root, 0, 1, map[string]string{"d/f": "data", "g": "x"}, 1)
	if err := os.Link(filepath.Join(v1, "g"), filepath.Join(v1, "d", "g2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("d/f", filepath.Join(v1, "link")); err != nil {
		t.Fatal(err)
	}
	if os.Getuid() == 0 {
		chownTree(t, v1, 65534, 65534)
	}
	trace := filepath.Join(t.TempDir(), "trace")
	cmd := exec.Command(strace, "-f", "-qq", "-o", trace, "-e", "trace=utimensat,fchownat,chown,lchown,chmod,fchmodat,utime,utimes,futimesat",
		os.Args[0], "-test.run=^TestTimesAndOwnersAreSetByDescriptor$", "-test.count=1")
	cmd.Env = append(os.Environ(), utimesChildEnv+"="+root)
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("CHILD-RESULT err=<nil>")) {
		t.Fatalf("child: %v\n%s", err, out)
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	byFd := regexp.MustCompile(`^(\d+ +)?(utimensat\(\d+, NULL,|(utimensat|fchownat)\(\d+, "", .*AT_EMPTY_PATH)`)
	var n int
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" || strings.Contains(line, "+++ exited") || strings.Contains(line, "--- SIG") || strings.Contains(line, "resumed>") {
			continue
		}
		n++
		if !byFd.MatchString(line) {
			t.Errorf("set by name: %s", line)
		}
	}
	// Times of d, f, g, the symlink and the top; owners too as root.
	if n < 5 {
		t.Errorf("only %d calls traced:\n%s", n, b)
	}
	if dir := Dir(root, inst(0, 2)); os.Getuid() == 0 {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(dir, "link"), &st); err != nil || st.Uid != 65534 {
			t.Errorf("symlink owner %d, want 65534 (%v)", st.Uid, err)
		}
	}
}

// As above, on the EFS-like mount, where the stale holder writes through
// another client (here: the file system behind the FUSE mount, past the
// kernel's attribute cache, kept for a minute as an NFS client may keep
// it). Validation must see the write (issue 24.2). (Here the listing of
// validation, READDIRPLUS, renews the attributes anyway; validation also
// asks the file system with statx AT_STATX_FORCE_SYNC, for clients that
// list without them.)
func TestCopiedFileWrittenByAnotherClientFailsValidationOnEFS(t *testing.T) {
	efs := efsfs.MountT(t, efsfs.Profile{Cache: time.Minute})
	root := efs.Dir
	rel := "raft-partition/partitions/1/journal-1.log"
	makeVersion(t, root, 0, 4, map[string]string{rel: "preallocated segment", "other": "x"}, 4)
	backing := filepath.Join(efs.Backing, "node-0", "v4", rel)
	hooked := false
	setHook(t, &testHookBeforeValidate, func(string) {
		hooked = true
		// The client's cache is current (reading the file for the copy
		// invalidated its atime; a stat renews it) ...
		if _, err := os.Stat(filepath.Join(root, "node-0", "v4", rel)); err != nil {
			t.Error(err)
		}
		// ... when another client writes.
		time.Sleep(20 * time.Millisecond) // past the time stamp granularity
		writeStaleInPlace(t, backing)
	})
	_, _, err := Prepare(context.Background(), root, inst(0, 5), Options{Logger: quiet})
	if !hooked {
		t.Fatal("hook never ran")
	}
	if !errors.Is(err, ErrValidation) {
		t.Fatalf("err = %v, want ErrValidation: the source %q was written after its copy", err, mustRead(t, backing))
	}
}
