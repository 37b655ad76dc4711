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

const camundaGCChildEnv = "DATADIR_CAMUNDA_GC_DURING_FLUSH_ROOT"

// Mixed operation: a Camunda broker paused between its own preparation and
// its GC (a stale holder) resumes while nodeid prepares v5. Camunda's GC
// deletes every directory without a valid marker, file by file. If that
// walk is under way after validation (here, during the flush), the marker
// would land on a torn copy, and Camunda's final rmdir fails on it: a valid
// directory that is not complete. Prepare checks the target again after
// its marker, so this schedule fails with ErrValidation and leaves our
// leftover, which the same tenure then redoes (found by review). A deletion
// after that re-check still goes through (see docs/datadir.md): a Camunda
// provider must not run on a node while nodeid prepares it.
//
// strace delays the child's syncfs(2) (after validation, before the
// marker); the parent plays Camunda's GC walk, which removes one file then.
func TestCamundaGCDuringTheFlushFailsThePreparation(t *testing.T) {
	files := map[string]string{
		"raft-partition/partitions/1/log-1.log":                    "journal",
		"raft-partition/partitions/1/snapshots/1-1-5-4/000042.sst": "snapshot",
	}
	opts := func() Options { return Options{Rules: zeebe(t), Tenure: "task-a", Logger: quiet} }
	if root := os.Getenv(camundaGCChildEnv); root != "" {
		_, _, err := Prepare(context.Background(), root, inst(0, 5), opts())
		fmt.Printf("A-RESULT validation=%v err=%v\n", errors.Is(err, ErrValidation), err)
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
		os.Args[0], "-test.run=^TestCamundaGCDuringTheFlushFailsThePreparation$", "-test.count=1")
	cmd.Env = append(os.Environ(), camundaGCChildEnv+"="+root)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(target, "raft-partition/partitions/1/log-1.log")
	awaitPath(t, cmd, &out, victim, "copied")
	time.Sleep(500 * time.Millisecond) // A is in its delayed syncfs by now
	// Camunda's GC: v5 has no valid marker, so it is deleted, file by file.
	if err := os.Remove(victim); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	t.Logf("child: %s", strings.TrimSpace(out.String()))
	if !strings.Contains(out.String(), "A-RESULT validation=true") {
		t.Fatalf("want ErrValidation from the re-check after the marker; child:\n%s", out.String())
	}
	if exists(t, filepath.Join(target, MarkerName)) {
		t.Errorf("v5 kept its marker over a torn copy (contents %v)", keys(contents(t, target)))
	}
	// Our failed target is removed; the retry makes it anew.
	if exists(t, target) {
		t.Errorf("v5 stayed after the failure: %v", keys(contents(t, target)))
	}
	dir, _ := mustPrepare(t, root, inst(0, 5), opts())
	equalMaps(t, contents(t, dir), files)
}
