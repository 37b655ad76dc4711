package datadir

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// readOnlyDir returns a directory that the test process cannot write to. As
// root, mode bits do not stop writes, so it sets the immutable flag instead.
func readOnlyDir(t *testing.T) string {
	dir := t.TempDir()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o755) })
		return dir
	}
	flags, err := inodeFlags(dir)
	if err != nil {
		t.Fatalf("reading inode flags of %s: %v", dir, err)
	}
	if err := setInodeFlags(dir, flags|fsImmutableFL); err != nil {
		t.Fatalf("setting the immutable flag on %s (needed as root): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := setInodeFlags(dir, flags); err != nil {
			t.Error(err)
		}
	})
	return dir
}

// fsImmutableFL is FS_IMMUTABLE_FL from linux/fs.h (chattr +i).
const fsImmutableFL = 0x10

// inodeFlags reads the inode flags of path (lsattr).
func inodeFlags(path string) (uint32, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
}

// setInodeFlags sets the inode flags of path (chattr).
func setInodeFlags(path string, flags uint32) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(flags))
}

const crashChildEnv = "DATADIR_TEST_CRASH_ROOT"

// TestKilledMidCopy runs Prepare in a child process (this test binary,
// re-executed), kills it with SIGKILL in the middle of the copy, and checks
// that the next Prepare removes the half-made directory and redoes it.
func TestKilledMidCopy(t *testing.T) {
	if root := os.Getenv(crashChildEnv); root != "" {
		crashChild(root)
		return
	}
	root := t.TempDir()
	const nFiles = 400
	files := map[string]string{}
	for i := range nFiles {
		files[fmt.Sprintf("d%d/f%03d", i%7, i)] = strings.Repeat(fmt.Sprint(i%10), 64<<10)
	}
	src := makeVersion(t, root, 0, 1, files, 1)

	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledMidCopy$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+root)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	started := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "copying" {
				started <- true
				return
			}
		}
		started <- false
	}()
	select {
	case ok := <-started:
		if !ok {
			cmd.Wait()
			t.Fatal("child ended before copying")
		}
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatal("child did not start copying")
	}
	// The child stops half-way through the copy and waits for the kill.
	if err := cmd.Process.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil {
		t.Fatal("child exited cleanly; expected it to be killed")
	}

	target := Dir(root, inst(0, 2))
	if exists(t, filepath.Join(target, MarkerName)) {
		t.Fatal("the killed child wrote the marker")
	}
	if n := len(contents(t, target)); n == 0 || n >= nFiles {
		t.Fatalf("child copied %d of %d files before the kill; want it killed mid-copy", n, nFiles)
	}

	dir, res := mustPrepare(t, root, inst(0, 2), Options{VerifyContent: true, Tenure: "task-1"})
	if !res.Redone || !res.HasSource || res.Source != 1 || res.FilesCopied != nFiles {
		t.Errorf("result = %+v", res)
	}
	equalMaps(t, contents(t, dir), contents(t, src))
	if m := readMarkerFile(t, dir); m["version"] != float64(2) {
		t.Errorf("marker = %v", m)
	}
}

// crashChild prepares node-0/v2, announces on stdout when half of the copy
// is done, and stops there until the parent kills it: mid-copy however
// slowly either process runs.
func crashChild(root string) {
	n := 0
	testHookFile = func(string) {
		if n++; n == 200 { // of the 400 files TestKilledMidCopy makes
			fmt.Println("copying")
			time.Sleep(time.Hour)
		}
	}
	_, _, err := Prepare(context.Background(), root, inst(0, 2), Options{Logger: quiet, Tenure: "task-1"})
	fmt.Fprintln(os.Stderr, "crash child: Prepare returned before it was killed:", err)
	os.Exit(3)
}

func TestSpecialFilesAreLeftOut(t *testing.T) {
	root := t.TempDir()
	src := makeVersion(t, root, 0, 1, map[string]string{"data/keep": "k"}, 1)
	if err := unix.Mkfifo(filepath.Join(src, "data", "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir, res := mustPrepare(t, root, inst(0, 2), Options{})
	equalMaps(t, contents(t, dir), map[string]string{"data/keep": "k"})
	if exists(t, filepath.Join(dir, "data", "fifo")) {
		t.Error("FIFO carried over")
	}
	if res.Skipped != 2 { // the FIFO and the source's marker
		t.Errorf("Skipped = %d, want 2", res.Skipped)
	}
}
