package main_test

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/efsfs"
	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// A loss after the command's tree was reaped (the stop sequence waiting on
// a hung data root) must kill nothing: the pid may belong to an unrelated
// process by then (found by a review: run's own loss action killed
// child.Process.Pid's group after fence.stopped()). Pid allocation is
// steered through ns_last_pid, so the test re-runs itself in a private PID
// namespace (unshare, util-linux; root).
func TestLossAfterTheTreeIsReapedKillsNoReusedPid(t *testing.T) {
	if os.Getenv("NODEID_TEST_IN_PIDNS") == "" {
		if os.Geteuid() != 0 {
			if os.Getenv("CI") == "true" {
				t.Fatal("needs root for a PID namespace, and always runs under CI=true")
			}
			t.Skip("SKIPPED, needs root for a PID namespace (always runs under CI=true)")
		}
		cmd := exec.Command("unshare", "--pid", "--fork", "--mount-proc", os.Args[0],
			"-test.run", "^TestLossAfterTheTreeIsReapedKillsNoReusedPid$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "NODEID_TEST_IN_PIDNS=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestLossAfterTheTreeIsReapedKillsNoReusedPid") {
			t.Fatalf("in a PID namespace: %v\n%s", err, out)
		}
		return
	}
	f := efsfs.MountT(t, efsfs.Profile{})
	c := newCluster(t, s3test.StartVersity(t), 1)
	tk := c.start("holder", []string{"NODEID_DATA_ROOT=" + f.Dir, "NODEID_FS_TIMEOUT=60s"},
		"run", "--", "sh", "-c", `echo "$NODE_ID $NODE_VERSION $NODE_PREVIOUS_GRACEFUL" > "$REPORT"; exec sleep 3`)
	tk.identity(t, 20*time.Second)
	m := regexp.MustCompile(`msg="command started"[^\n]*? pid=(\d+)`).FindStringSubmatch(tk.out.String())
	if m == nil {
		t.Fatalf("no pid:\n%s", tk.out.String())
	}
	pid, _ := strconv.Atoi(m[1])
	f.HangAll() // the syncfs before the release hangs (open of the data dir)
	t.Cleanup(f.Release)
	waitFor(t, 10*time.Second, "the tree reaped", func() bool { return strings.Contains(tk.out.String(), "processes of the command gone") })
	time.Sleep(time.Second) // let the threads of the blocked syscalls start first
	// An unrelated process takes the pid as a group leader (threads take
	// pids too: retry until the fork gets it).
	var victim *exec.Cmd
	for try := 0; try < 200; try++ {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
			t.Fatal(err)
		}
		v := exec.Command("sleep", "60")
		v.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := v.Start(); err != nil {
			t.Fatal(err)
		}
		if v.Process.Pid == pid {
			victim = v
			break
		}
		v.Process.Kill()
		v.Wait()
	}
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil {
		t.Logf("pid in use: %s", b)
	}
	if victim == nil {
		t.Fatal("could not give the reaped command's pid to another process")
	}
	defer victim.Process.Kill()
	t.Logf("victim pid %d = the reaped command's pid, its own session and group", pid)
	vdone := make(chan error, 1)
	go func() { vdone <- victim.Wait() }()
	// Someone overwrites the lease: the next renewal is a loss.
	repo := c.repo()
	rec, err := repo.Get(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	other := nodeid.Lease{TaskID: "other", Instance: rec.Lease.Instance, Duration: 2 * time.Second, Nonce: "x", Acquirable: true, Expires: time.Now().Add(time.Hour)}
	if _, err := repo.Write(context.Background(), other, rec.ETag); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the loss", func() bool { return strings.Contains(tk.out.String(), "lease lost") })
	select {
	case err := <-vdone:
		t.Fatalf("unrelated process %d (reused pid of the reaped command, setsid) was killed after the loss: %v\n%s", pid, err, tk.out.String())
	case <-time.After(2 * time.Second):
	}
}
