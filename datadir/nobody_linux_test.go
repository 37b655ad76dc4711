package datadir

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// childEnv names, in a child started by asNobody, the directory it works
// in; the same test then runs its unprivileged part.
const childEnv = "NODEID_TEST_NOBODY_DIR"

// asNobody runs the test named test again, in a child process as uid and
// gid 65534, with a fresh directory owned by it, and fails if the child
// fails. As root only: otherwise the test itself is unprivileged already
// and runs its part directly with a temporary directory (see nobodyDir).
// setup, if any, runs first, as root, on that directory.
func asNobody(t *testing.T, test string, setup ...func(work string)) {
	t.Helper()
	if os.Getuid() != 0 {
		return
	}
	// The test binary's own directory is private to root: copy it.
	bin, err := os.MkdirTemp("", "nodeid-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(filepath.Join(bin, "datadir.test"), os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(bin, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(work, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	for _, f := range setup {
		f(work)
	}
	cmd := exec.Command(filepath.Join(bin, "datadir.test"), "-test.run=^"+test+"$", "-test.count=1", "-test.v")
	cmd.Dir = work
	cmd.Env = append(os.Environ(), childEnv+"="+work, "TMPDIR="+work)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	b, err := cmd.CombinedOutput()
	t.Logf("as uid 65534:\n%s", b)
	if err != nil {
		t.Fatalf("as uid 65534: %v", err)
	}
}

// nobodyDir is the directory the unprivileged part of a test works in, and
// whether this process is that part (a child of asNobody, or a test run
// by a user other than root).
func nobodyDir(t *testing.T) (string, bool) {
	if d := os.Getenv(childEnv); d != "" {
		if os.Getuid() != 65534 {
			t.Fatalf("%s set, but uid %d", childEnv, os.Getuid())
		}
		return d, true
	}
	if os.Getuid() != 0 {
		return t.TempDir(), true
	}
	return "", false
}
