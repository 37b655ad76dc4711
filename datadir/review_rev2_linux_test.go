package datadir

// Review tests (adversarial review rev2 of datadir: tenures, SettleTime,
// zeebe preset). Each one is a schedule that breaks a stated invariant.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

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
