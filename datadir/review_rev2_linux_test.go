package datadir

// Review tests (adversarial review rev2 of datadir: tenures, SettleTime,
// zeebe preset). Each one is a schedule that breaks a stated invariant.

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

const reviewMkdirChildEnv = "DATADIR_REVIEW_MKDIR_ROOT"

// Two holders of version 2 (the case ErrVersionUsed exists for). A has
// created v2 (mkdirat) but not yet opened it (makeDir's openDirAt); B judges
// v2 empty, removes it (rmdir) and prepares v2 completely. A's openDirAt then
// opens B's directory, writes its own in-progress file into it (B removed
// its own after the marker) and fails on the first file it copies (EEXIST)
// with an untyped error. nodeid-init maps only the typed refusals to exit 6;
// an untyped error goes to giveBack(false), which releases the lease
// gracefully when the predecessor had released gracefully, so that the next
// holder hard-links every file of B's v2 while B's broker writes it.
//
// The pause is exact: strace delays the return of A's mkdirat in node-0 (the
// first mkdirat relative to node-0's descriptor is the target's).
func TestReviewLoserAfterMkdirGetsATypedRefusal(t *testing.T) {
	if root := os.Getenv(reviewMkdirChildEnv); root != "" {
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
		os.Args[0], "-test.run=^TestReviewLoserAfterMkdirGetsATypedRefusal$", "-test.count=1")
	cmd.Env = append(os.Environ(), reviewMkdirChildEnv+"="+root)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !exists(t, target) {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("A never created %s; output:\n%s", target, out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
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
		t.Errorf("A (loser of the race for v2) got an untyped error: %s\n"+
			"nodeid-init treats it as an ordinary failure (no exit 6; giveBack(false) releases the lease gracefully after a graceful predecessor)", line)
	}
	if exists(t, filepath.Join(dirB, PreparingName)) {
		b, _ := os.ReadFile(filepath.Join(dirB, PreparingName))
		t.Errorf("A wrote its in-progress file into B's completed v2: %s", b)
	}
}

const reviewCamundaGCChildEnv = "DATADIR_REVIEW_CAMUNDA_GC_ROOT"

// Mixed operation: a Camunda broker paused between its own preparation and
// its GC (a stale holder) resumes while nodeid prepares v5. Camunda's GC
// deletes every directory without a valid marker, file by file; the docs
// call that harmless for a nodeid directory being prepared ("it holds only
// copies and links"). But if the deletion walk is under way when Prepare
// writes its marker (after validation: here, during its syncfs), v5 becomes
// valid with files missing, and Camunda's final rmdir fails on the marker:
// a valid directory that is not a complete copy, the one invariant the
// marker stands for. The next takeover copies the torn tree.
//
// strace delays the child's syncfs(2) (after validation, before the
// marker); the parent plays Camunda's GC walk, which has removed one file
// when the marker lands.
func TestReviewCamundaGCDuringTheFlushLeavesAValidTornDirectory(t *testing.T) {
	files := map[string]string{
		"raft-partition/partitions/1/log-1.log":                    "journal",
		"raft-partition/partitions/1/snapshots/1-1-5-4/000042.sst": "snapshot",
	}
	if root := os.Getenv(reviewCamundaGCChildEnv); root != "" {
		_, _, err := Prepare(context.Background(), root, inst(0, 5), Options{Rules: zeebe(t), Tenure: "task-a", Logger: quiet})
		fmt.Printf("A-RESULT err=%v\n", err)
		os.Exit(0)
	}
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("SKIPPED LOUDLY: needs strace")
	}
	root := t.TempDir()
	v4 := makeVersion(t, root, 0, 4, files, -1)
	writeFiles(t, v4, map[string]string{MarkerName: camundaMarker(4, ver(3))})
	target := Dir(root, inst(0, 5))
	cmd := exec.Command(strace, "-f", "-qq", "-o", "/dev/null",
		"-e", "trace=syncfs", "-e", "inject=syncfs:delay_enter=2000000",
		os.Args[0], "-test.run=^TestReviewCamundaGCDuringTheFlushLeavesAValidTornDirectory$", "-test.count=1")
	cmd.Env = append(os.Environ(), reviewCamundaGCChildEnv+"="+root)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(target, "raft-partition/partitions/1/log-1.log")
	deadline := time.Now().Add(20 * time.Second)
	for !exists(t, victim) {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("A never copied %s; output:\n%s", victim, out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // A is in its delayed syncfs by now
	// Camunda's GC: v5 has no valid marker, so it is deleted, file by file.
	if err := os.Remove(victim); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	t.Logf("child: %s", strings.TrimSpace(out.String()))
	if !exists(t, filepath.Join(target, MarkerName)) {
		return // refused: fine
	}
	if !camundaValid(t, target, 5) {
		return
	}
	got := contents(t, target)
	if _, ok := got["raft-partition/partitions/1/log-1.log"]; !ok {
		t.Errorf("v5 has a valid marker but lacks raft-partition/partitions/1/log-1.log: a torn copy marked complete (contents %v)", keys(got))
	}
}
