package datadir

// From adversarial review rev19: invariant 2 / crash-safety invariant ("a
// version directory with a valid marker holds a complete, validated copy").

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const rev19ChildEnv = "DATADIR_TEST_REV19_ROOT"

// Schedule: S holds v2 and is preparing node-0/v2 from v1 (tenure S); its
// copy is done (a leftover: files and .nodeid-preparing, no marker). S's
// lease expires, P takes over with v3 and runs Prepare(v3):
// removeLeftoversBelow judges v2 stateLeftover and removeLeftover lists its
// names. P is then delayed (scheduling, an NFS round trip) before its first
// unlinkat (since r24: before its claim, the rename of v2's in-progress
// file, which took the unlink's place). Meanwhile S, whose context was not cancelled yet (paused past
// its last ctx check), validates, writes its marker, passes its recheck and
// removes its in-progress file: v2 is valid. P resumes and deletes the names
// it listed. rmdir fails (the marker is left), and v2 is a valid directory
// with its data gone. P then copies v3 from v1 (its plan) and its GC keeps
// v3 and the torn v2 and deletes v1, the last complete older copy.
//
// The delay of P is forced with strace's syscall delay injection on P's
// first renameat (its claim); P runs in a child process (this test binary).
func TestRemovalOfALeftoverCompletedMeanwhileLeavesItWhole(t *testing.T) {
	if root := os.Getenv(rev19ChildEnv); root != "" {
		_, res, err := Prepare(context.Background(), root, inst(0, 3), Options{Logger: quiet, Tenure: "P"})
		fmt.Printf("P: Prepare(v3): removed=%v source=%v err=%v\n", res.Removed, res.Source, err)
		return
	}
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("needs strace")
	}
	if out, err := exec.Command(strace, "-f", "-o", "/dev/null", "true").CombinedOutput(); err != nil {
		t.Skipf("strace cannot trace here: %v %s", err, out)
	}
	root := t.TempDir()
	files := map[string]string{}
	for i := range 8 {
		files[fmt.Sprintf("f%d", i)] = strings.Repeat(fmt.Sprint(i), 4096)
	}
	mustPrepare(t, root, inst(0, 1), Options{Tenure: "S0"})
	writeFiles(t, Dir(root, inst(0, 1)), files) // the broker of v1 wrote its data

	reached, resume := make(chan struct{}), make(chan struct{})
	setHook(t, &testHookBeforeValidate, func(string) {
		close(reached)
		<-resume
	})
	sDone := goPrepare(root, inst(0, 2), Options{Logger: quiet, Tenure: "S"})
	<-reached // v2: copied files and S's in-progress file, no marker

	// P's first rename is its claim of v2 (its in-progress file renamed).
	cmd := exec.Command(strace, "-f", "-o", "/dev/null", "-e", "trace=renameat,renameat2",
		"-e", "inject=renameat,renameat2:delay_enter=4000000:when=1",
		os.Args[0], "-test.run=^TestRemovalOfALeftoverCompletedMeanwhileLeavesItWhole$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), rev19ChildEnv+"="+root)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // P judged v2; its claim (first renameat) is delayed
	close(resume)
	s := <-sDone
	if s.err != nil {
		t.Fatalf("S: Prepare(v2): %v (P's removal did not wait)", s.err)
	}
	t.Logf("S: Prepare(v2) succeeded: %s is valid", s.dir)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child P: %v\n%s", err, out.String())
	}
	t.Logf("child P:\n%s", out.String())

	v2 := Dir(root, inst(0, 2))
	d, err := os.Open(v2)
	if err != nil {
		t.Fatalf("v2 is gone altogether: %v", err)
	}
	defer d.Close()
	_, merr := readMarker(d, 2)
	var missing []string
	for name := range files {
		if _, err := os.Lstat(filepath.Join(v2, name)); err != nil {
			missing = append(missing, name)
		}
	}
	_, v1err := os.Stat(Dir(root, inst(0, 1)))
	if merr == nil && len(missing) > 0 {
		t.Errorf("v2 has a valid marker but lacks %d of %d files (%v): GC of another tenure's leftover deleted a directory after it became valid; v1 still there: %v",
			len(missing), len(files), missing, v1err == nil)
	}
}
