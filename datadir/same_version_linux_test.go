package datadir

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const loserAfterMkdirEnv = "DATADIR_LOSER_AFTER_MKDIR_ROOT"

// Two holders of version 2 (the case ErrVersionUsed exists for). A has
// created v2 (mkdirat) but not yet opened it (makeDir opens by name); B
// judges v2 empty, removes it (rmdir) and prepares v2 completely. A's open
// then finds B's directory: it must refuse with ErrVersionUsed (nodeid-init
// exits 6 and leaves the lease to expire) and write nothing into it. Before
// the fix A wrote its in-progress file into B's v2 and failed with an
// untyped error, which nodeid-init treats as an ordinary failure: after a
// graceful predecessor it releases gracefully, and the next holder
// hard-links every file of B's v2 while B's broker writes it (found by
// review).
//
// The pause is exact: strace delays the return of A's mkdirat in node-0 (the
// first mkdirat relative to node-0's descriptor is the target's).
func TestLoserOfARaceRightAfterItsMkdirIsRefused(t *testing.T) {
	if root := os.Getenv(loserAfterMkdirEnv); root != "" {
		_, _, err := Prepare(context.Background(), root, inst(0, 2), Options{Cluster: clusterA, Tenure: "task-a", SettleTime: time.Minute, Logger: quiet})
		fmt.Printf("A-RESULT typed=%v err=%v\n", errors.Is(err, ErrVersionUsed), err)
		os.Exit(0)
	}
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("SKIPPED LOUDLY: needs strace")
	}
	root := t.TempDir()
	claimRoot(t, root, clusterA)
	files := map[string]string{"log/segment-1": "data of v1", "snapshots/1/a.sst": "snap"}
	makeVersion(t, root, 0, 1, files, 1)
	nodeDir := filepath.Join(root, "node-0")
	target := Dir(root, inst(0, 2))
	cmd := exec.Command(strace, "-f", "-qq", "-o", "/dev/null",
		"-P", nodeDir,
		"-e", "trace=mkdirat", "-e", "inject=mkdirat:delay_exit=3000000",
		os.Args[0], "-test.run=^TestLoserOfARaceRightAfterItsMkdirIsRefused$", "-test.count=1")
	cmd.Env = append(os.Environ(), loserAfterMkdirEnv+"="+root)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	awaitPath(t, cmd, &out, target, "created")
	// A sits in its mkdirat; B, the other holder of v2, goes on.
	dirB, resB, errB := Prepare(context.Background(), root, inst(0, 2), Options{Cluster: clusterA, Tenure: "task-b", SettleTime: time.Minute, Logger: quiet})
	if errB != nil {
		cmd.Wait()
		t.Fatalf("B: %v (A's output: %s)", errB, out.String())
	}
	if !resB.Redone {
		t.Fatalf("B did not remove A's empty v2 (Redone=false); schedule not reached")
	}
	cmd.Wait()
	var line string
	for l := range strings.SplitSeq(out.String(), "\n") {
		if strings.HasPrefix(l, "A-RESULT") {
			line = l
		}
	}
	t.Logf("A: %s", line)
	if line == "" {
		t.Fatalf("no result from A; output:\n%s", out.String())
	}
	if !strings.Contains(line, "typed=true") {
		t.Errorf("A (loser of the race for v2) got an untyped error: %s", line)
	}
	if exists(t, filepath.Join(dirB, PreparingName)) {
		b, _ := os.ReadFile(filepath.Join(dirB, PreparingName))
		t.Errorf("A wrote its in-progress file into B's completed v2: %s", b)
	}
}

// awaitPath waits up to 20 seconds for p to appear while the child cmd
// runs; otherwise it kills the child and fails with its output.
func awaitPath(t *testing.T, cmd *exec.Cmd, out *bytes.Buffer, p, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !exists(t, p) {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("A never %s %s; output:\n%s", what, p, out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
