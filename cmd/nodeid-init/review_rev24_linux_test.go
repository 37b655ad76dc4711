package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/efsfs"
	"github.com/nodeid/nodeid/internal/s3test"
)

// Review rev24 (a file-system phase that can hang without a bound): the
// watchdog of a preparation probes only the data root, and the copy walks
// into a mount inside the source (copied as cp -a copies it, by design).
// A hung file system mounted there (a stale NFS or FUSE mount) hangs
// Prepare for good while the probe of the root keeps answering: the task
// renews its lease and stays healthy, the node never starts, no exit 7.
func TestReviewRev24HungMountInsideTheSourceIsBounded(t *testing.T) {
	if err := efsfs.Available(); err != nil {
		t.Skipf("no FUSE: %v", err)
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
		t.Skipf("mount: %v", err)
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
	unhealthy := watchHealth(tk, addr)
	select {
	case <-tk.done:
		if tk.code != exitFSHung {
			t.Fatalf("exit code %d, want %d:\n%s", tk.code, exitFSHung, tk.out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("still running %v after the preparation hung in %s (2 s bound; unhealthy seen: %v); last output:\n%s",
			time.Since(hungAt).Round(time.Second), mnt, unhealthy.Load(), tail(tk.out.String(), 1500))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
