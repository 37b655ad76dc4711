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

// Review 2: SIGKILL between creating .nodeid-preparing (openat O_CREAT|O_EXCL)
// and writing its content leaves an empty in-progress file. ownLeftover
// cannot parse it, so the directory is "not ours": datadir.md says a crash
// before the marker leaves our leftover (removed by the next Prepare of the
// version, or by GC), and that a crash between mkdir and the in-progress
// file leaves an empty directory; neither holds for this line. The
// directory is never removed (GC logs "not ours, left in place" forever),
// and a redo of the same version is refused with ErrUnrecognized (exit 6).
// (A power loss after the write but before its fsync gives the same empty
// file on ext4.)
//
// The kill is exact: strace injects SIGKILL at the entry of the first
// write(2) to <target>/.nodeid-preparing in a child running Prepare.

const review2CrashEnv = "DATADIR_REVIEW2_CRASH_ROOT"

func TestReview2KilledWhileWritingTheInProgressFile(t *testing.T) {
	if root := os.Getenv(review2CrashEnv); root != "" {
		_, _, err := Prepare(context.Background(), root, inst(0, 2), Options{Cluster: clusterA, Logger: quiet})
		fmt.Fprintln(os.Stderr, "child: Prepare returned, not killed:", err)
		os.Exit(3)
	}
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("needs strace")
	}
	root := t.TempDir()
	makeVersion(t, root, 0, 1, map[string]string{"data": "v1 data"}, 1)
	target := Dir(root, inst(0, 2))
	cmd := exec.Command(strace, "-f", "-qq", "-o", "/dev/null",
		"-P", filepath.Join(target, PreparingName),
		"-e", "trace=write", "-e", "inject=write:signal=KILL",
		os.Args[0], "-test.run=^TestReview2KilledWhileWritingTheInProgressFile$", "-test.count=1")
	cmd.Env = append(os.Environ(), review2CrashEnv+"="+root)
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
