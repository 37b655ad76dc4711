package datadir

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// SIGKILL between creating .nodeid-preparing (openat O_CREAT|O_EXCL) and
// writing its content leaves an empty in-progress file, and nothing else:
// no copy starts before that file is written and fsynced. Review 2 found
// such a directory "not ours" forever (never collected, a redo refused with
// ErrUnrecognized, exit 6); it holds no data and is removed like an empty
// directory.
//
// The kill is exact: strace injects SIGKILL at the entry of the first
// write(2) to <target>/.nodeid-preparing in a child running Prepare.

const crashInProgressEnv = "DATADIR_CRASH_INPROGRESS_ROOT"

func TestKilledWhileWritingTheInProgressFile(t *testing.T) {
	if root := os.Getenv(crashInProgressEnv); root != "" {
		_, _, err := Prepare(context.Background(), root, inst(0, 2), Options{Cluster: clusterA, Logger: quiet})
		fmt.Fprintln(os.Stderr, "child: Prepare returned, not killed:", err)
		os.Exit(3)
	}
	strace, err := exec.LookPath("strace")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("strace is needed to kill Prepare at an exact system call (.ci/run installs it)")
		}
		t.Skip("SKIPPED LOUDLY: needs strace to kill Prepare at an exact system call")
	}
	root := t.TempDir()
	makeVersion(t, root, 0, 1, map[string]string{"data": "v1 data"}, 1)
	target := Dir(root, inst(0, 2))
	cmd := exec.Command(strace, "-f", "-qq", "-o", "/dev/null",
		"-P", filepath.Join(target, PreparingName),
		"-e", "trace=write", "-e", "inject=write:signal=KILL",
		os.Args[0], "-test.run=^TestKilledWhileWritingTheInProgressFile$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashInProgressEnv+"="+root)
	out, _ := cmd.CombinedOutput()
	fi, err := os.Stat(filepath.Join(target, PreparingName))
	if err != nil || fi.Size() != 0 {
		t.Fatalf("the child was not killed at the in-progress write (stat: %v, %v); output:\n%s", fi, err, out)
	}

	// Next takeover (v3): GC should remove our own leftover v2.
	if _, err := Collect(context.Background(), root, inst(0, 3), Options{Cluster: clusterA, Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	if exists(t, target) {
		t.Errorf("a Prepare killed before its marker left %s, which GC does not recognise as ours and never removes", target)
	}
	// A redo of the same version (a retried init container) refuses.
	if _, _, err := Prepare(context.Background(), root, inst(0, 2), Options{Cluster: clusterA, Logger: quiet}); errors.Is(err, ErrUnrecognized) {
		t.Errorf("redo of v2 after the crash: %v", err)
	}
}

// A directory counts as holding no data only if the in-progress file is its
// only entry, a regular file, and empty or naming our cluster (any version).
// Anything else is left in place.
func TestOnlyAnInProgressFile(t *testing.T) {
	other := Cluster{Bucket: "bucket-b", Prefix: "prod/"}
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, dir string)
		removed bool
	}{
		{"empty", func(t *testing.T, dir string) {
			writeFiles(t, dir, map[string]string{PreparingName: ""})
		}, true},
		{"ours for another version", func(t *testing.T, dir string) {
			writePreparing(t, dir, 7, clusterA)
		}, true},
		{"another cluster's", func(t *testing.T, dir string) {
			writePreparing(t, dir, 2, other)
		}, false},
		{"unparseable", func(t *testing.T, dir string) {
			writeFiles(t, dir, map[string]string{PreparingName: "data"})
		}, false},
		{"empty, next to data", func(t *testing.T, dir string) {
			writeFiles(t, dir, map[string]string{PreparingName: "", "data": "x"})
		}, false},
		{"a directory with data", func(t *testing.T, dir string) {
			writeFiles(t, dir, map[string]string{PreparingName + "/data": "x"})
		}, false},
		{"a symlink", func(t *testing.T, dir string) {
			if err := os.Symlink("/dev/null", filepath.Join(dir, PreparingName)); err != nil {
				t.Fatal(err)
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			claimRoot(t, root, clusterA) // Collect deletes nothing on an unclaimed root
			makeVersion(t, root, 0, 1, map[string]string{"data": "v1"}, 1)
			dir := Dir(root, inst(0, 2))
			if err := os.MkdirAll(dir, 0o750); err != nil {
				t.Fatal(err)
			}
			tc.setup(t, dir)
			if _, err := Collect(context.Background(), root, inst(0, 3), Options{Cluster: clusterA, Logger: quiet}); err != nil {
				t.Fatal(err)
			}
			if got := !exists(t, dir); got != tc.removed {
				t.Errorf("removed = %v, want %v", got, tc.removed)
			}
		})
	}
}
