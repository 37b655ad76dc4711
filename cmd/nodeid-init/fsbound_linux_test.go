package main_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/efsfs"
	"github.com/nodeid/nodeid/internal/s3test"
)

// The exit code of a hung data root (docs/cli.md).
const exitFSHung = 7

// fsHangEnv runs a task on the FUSE data root with a 2 s file-system bound.
func fsHangEnv(f *efsfs.FS, addr string) []string {
	return []string{"NODEID_DATA_ROOT=" + f.Dir, "NODEID_METRICS_ADDR=" + addr, "NODEID_FS_TIMEOUT=2s",
		"NODEID_STOP_TIMEOUT=5s", "NODEID_TEST_HANG_EXIT_PAUSE=500ms"}
}

// healthSeen is what the two health checks said while the task ran.
type healthSeen struct {
	http atomic.Bool // /healthz answered anything but 200
	cmd  atomic.Bool // `nodeid-init health` (the ECS check) exited non-zero
}

// watchHealth polls /healthz and `nodeid-init health` (the task's default
// lease file) until the task exits and reports whether either failed
// while the task was still running.
func watchHealth(c *cluster, tk *task, addr string) *healthSeen {
	var seen healthSeen
	client := &http.Client{Timeout: time.Second}
	go func() {
		for tk.running() {
			if resp, err := client.Get("http://" + addr + "/healthz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK && tk.running() {
					seen.http.Store(true)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	go func() {
		for tk.running() {
			cmd := exec.Command(binary, "health")
			cmd.Env = c.env
			if err := cmd.Run(); err != nil && tk.running() {
				seen.cmd.Store(true)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return &seen
}

// checkHangExit asserts the exit within the bound with exit code 7, that
// both health checks turned unhealthy first (issue 26.8: `nodeid-init
// health` passed on the `held` deadline until the exit), that the lease is
// still ours (left to expire, not released), and that a successor takes
// the ID once the file system answers again.
func checkHangExit(t *testing.T, c *cluster, f *efsfs.FS, tk *task, hungAt time.Time, unhealthy *healthSeen, version int) {
	t.Helper()
	// 2 s bound, a probe every 500 ms, the 500 ms pause, the grace.
	if code := tk.wait(t, 12*time.Second); code != exitFSHung {
		t.Fatalf("exit code %d, want %d (file system hung):\n%s", code, exitFSHung, tk.out.String())
	}
	if took := time.Since(hungAt); took > 10*time.Second {
		t.Errorf("exited %v after the hang, want within the 2s bound plus a few seconds", took)
	}
	if !unhealthy.http.Load() {
		t.Errorf("/healthz never answered non-200 before the exit")
	}
	if !unhealthy.cmd.Load() {
		t.Errorf("nodeid-init health never failed before the exit, while /healthz did")
	}
	if !strings.Contains(tk.out.String(), "file system hung") {
		t.Errorf("no \"file system hung\" line:\n%s", tk.out.String())
	}
	rec, err := c.repo().Get(context.Background(), 0)
	if err != nil || !rec.Lease.Held() || rec.Lease.TaskID != tk.name || int(rec.Lease.Instance.Version) != version {
		t.Fatalf("lease after the hang: %+v %v; want still held by %s v%d (left to expire, not released)", rec.Lease, err, tk.name, version)
	}
	f.SetProfile(efsfs.Profile{})
	f.Release()
	next := c.runTask("successor", "NODEID_DATA_ROOT="+f.Dir)
	id, v, graceful := next.identity(t, 30*time.Second)
	if id != 0 || v != version+1 || graceful {
		t.Errorf("successor got node %d v%d graceful=%t, want node 0 v%d after an expiry", id, v, graceful, version+1)
	}
}

// (a) The data root stops answering during the stop sequence: after the
// command exits on SIGTERM, the syncfs before the release never returns.
// Before the fix run waited forever, renewing and answering 200.
func TestDataRootHangingInTheStopSequenceExits7AndLeavesTheLease(t *testing.T) {
	f := efsfs.MountT(t, efsfs.Profile{})
	c := newCluster(t, s3test.StartVersity(t), 1)
	addr := freeAddr(t)
	tk := c.runTask("holder", fsHangEnv(f, addr)...)
	tk.identity(t, 20*time.Second)
	unhealthy := watchHealth(c, tk, addr)
	f.HangAll()
	hungAt := time.Now()
	if err := tk.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	checkHangExit(t, c, f, tk, hungAt, unhealthy, 1)
}

// (b) The data root stops answering while a takeover's preparation copies
// the previous version. Before the fix Prepare waited forever with the
// lease renewed.
func TestDataRootHangingDuringAPreparationExits7AndLeavesTheLease(t *testing.T) {
	// Every metadata operation costs 10 ms, so copying v1 takes seconds.
	f := efsfs.MountT(t, efsfs.Profile{Meta: 10 * time.Millisecond})
	c := newCluster(t, s3test.StartVersity(t), 1)
	v1 := c.deadHolderOfV1(t, f.Backing)
	for i := range 400 {
		if err := os.WriteFile(filepath.Join(v1, fmt.Sprintf("f%03d", i)), []byte("data"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	addr := freeAddr(t)
	tk := c.runTask("taker", fsHangEnv(f, addr)...)
	waitFor(t, 20*time.Second, "the takeover", func() bool { return strings.Contains(tk.out.String(), "acquired node id") })
	time.Sleep(300 * time.Millisecond) // into the copy
	unhealthy := watchHealth(c, tk, addr)
	f.HangAll()
	hungAt := time.Now()
	if strings.Contains(tk.out.String(), "command started") {
		t.Fatalf("the preparation finished before the hang; make v1 larger:\n%s", tk.out.String())
	}
	checkHangExit(t, c, f, tk, hungAt, unhealthy, 2)
}

// (c) A hung file system mounted inside the source (a stale NFS or FUSE
// mount), which the copy walks into (copied as cp -a copies it): the probe
// of the data root keeps answering, so only the preparation's progress
// (datadir.Options.Progress) shows the hang. Before the fix the task kept
// renewing and stayed healthy, the node never started, and it never exited 7.
func TestAMountHangingInsideTheSourceExits7(t *testing.T) {
	if err := efsfs.Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no FUSE under CI=true: %v", err)
		}
		t.Skipf("SKIPPED, no FUSE: %v", err)
	}
	c := newCluster(t, s3test.StartVersity(t), 1)
	v1 := c.deadHolderOfV1(t, c.root)
	if err := os.WriteFile(filepath.Join(v1, "data"), []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	mnt, backing := filepath.Join(v1, "archive"), t.TempDir()
	if err := os.Mkdir(mnt, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(backing, "old"), []byte("y"), 0o640); err != nil {
		t.Fatal(err)
	}
	f, err := efsfs.Mount(backing, mnt, efsfs.Profile{})
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() {
		f.Release()
		if err := f.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	f.HangAll()
	addr := freeAddr(t)
	tk := c.runTask("taker", fsHangEnv(f, addr)[1:]...) // the cluster's data root, 2 s bound
	waitFor(t, 20*time.Second, "the takeover", func() bool { return strings.Contains(tk.out.String(), "acquired node id") })
	hungAt := time.Now()
	unhealthy := watchHealth(c, tk, addr)
	select {
	case <-tk.done:
		if tk.code != exitFSHung {
			t.Fatalf("exit code %d, want %d:\n%s", tk.code, exitFSHung, tk.out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("still running %v after the preparation hung in %s (2 s bound; /healthz unhealthy seen: %v); last output:\n%s",
			time.Since(hungAt).Round(time.Second), mnt, unhealthy.http.Load(), tail(tk.out.String(), 1500))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
