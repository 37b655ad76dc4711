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
	"syscall"
	"testing"
	"time"
)

const fifoCompareChildEnv = "NODEID_TEST_FIFO_COMPARE_ROOT"

// After an ungraceful takeover validation compares each copied file byte
// by byte, opening the source by name again. A tenant (or stale holder)
// that swaps the source name for a FIFO it holds open for writing, after
// validation's fstatat and before that open, would make Prepare block in
// read for good (O_NONBLOCK only makes the open return; the read parks on
// the poller), while nodeid-init's watchdog, probing the data root, sees
// nothing wrong. What is opened must be the regular file judged:
// ErrValidation, before any read.
//
// strace (-P victim) delays each openat and newfstatat of the name
// "victim" by 1 s; the parent swaps it once validation's two fstatats of
// it (source, target) are done.
func TestFIFOSwappedBeforeTheContentCompareFailsValidation(t *testing.T) {
	if root := os.Getenv(fifoCompareChildEnv); root != "" {
		_, _, err := Prepare(context.Background(), root, inst(0, 2), Options{Logger: quiet, Workers: 1})
		fmt.Printf("A-RESULT validation=%v err=%v\n", errors.Is(err, ErrValidation), err)
		os.Exit(0)
	}
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("needs strace")
	}
	root := t.TempDir()
	v1 := makeVersion(t, root, 0, 1, map[string]string{"victim": "data of the broker"}, 1)
	trace := filepath.Join(t.TempDir(), "trace")
	cmd := exec.Command(strace, "-f", "-qq", "-o", trace, "-P", "victim",
		"-e", "trace=openat,newfstatat", "-e", "inject=openat,newfstatat:delay_enter=1000000",
		os.Args[0], "-test.run=^TestFIFOSwappedBeforeTheContentCompareFailsValidation$", "-test.count=1")
	cmd.Env = append(os.Environ(), fifoCompareChildEnv+"="+root)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	defer func() { cmd.Process.Kill(); <-done }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(trace)
		if strings.Count(string(b), "newfstatat(") >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("validation never stat'ed victim; trace:\n%s\nout:\n%s", b, out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The swap: a FIFO with a writer that never writes.
	fifo := filepath.Join(v1, "fifo.tmp")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := os.Rename(fifo, filepath.Join(v1, "victim")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		t.Logf("child: %s", strings.TrimSpace(out.String()))
		if !strings.Contains(out.String(), "A-RESULT") {
			t.Fatalf("child ended without a result:\n%s", out.String())
		}
		if !strings.Contains(out.String(), "A-RESULT validation=true") {
			t.Errorf("the swapped-in FIFO did not fail validation:\n%s", out.String())
		}
	case <-time.After(15 * time.Second):
		// Where it is: the child's goroutine dump (SIGQUIT).
		kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
		var pid int
		if _, err := fmt.Sscan(string(kids), &pid); err == nil {
			syscall.Kill(pid, syscall.SIGQUIT)
			select {
			case <-done:
			case <-time.After(5 * time.Second):
			}
		}
		var where []string
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.Contains(l, "datadir.") && !strings.Contains(l, "_test.go") {
				where = append(where, strings.TrimSpace(l))
			}
		}
		t.Fatalf("Prepare still running 15 s after the swap; blocked in:\n%s", strings.Join(where, "\n"))
	}
}
