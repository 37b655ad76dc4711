package main_test

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nodeid/nodeid/internal/efsfs"
	"github.com/nodeid/nodeid/internal/s3test"
)

// throttledFS is a loopback FUSE file system that answers every call,
// but moves data at a fixed rate (bytes per second, shared by all calls, as
// a throughput-limited EFS does): a read, write or copy_file_range of n
// bytes takes n/rate. Metadata answers at once.
type throttledFS struct {
	fuse.RawFileSystem
	rate float64
	mu   sync.Mutex
	next time.Time
}

func (r *throttledFS) take(n int64) {
	r.mu.Lock()
	now := time.Now()
	if r.next.Before(now) {
		r.next = now
	}
	r.next = r.next.Add(time.Duration(float64(n) / r.rate * float64(time.Second)))
	until := r.next
	r.mu.Unlock()
	time.Sleep(time.Until(until))
}

func (r *throttledFS) Read(c <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	r.take(int64(in.Size))
	return r.RawFileSystem.Read(c, in, buf)
}

func (r *throttledFS) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	r.take(int64(len(data)))
	return r.RawFileSystem.Write(c, in, data)
}

func (r *throttledFS) CopyFileRange(c <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	r.take(int64(in.Len))
	return r.RawFileSystem.CopyFileRange(c, in)
}

// A review of 180a4dc: the progress watchdog (--fs-timeout without a step
// of datadir.Options.Progress) fired on a file system that is healthy but
// slow in throughput. A step was one copy_file_range call of up to 16 MiB,
// so progress stands still for 16 MiB / throughput; with the default
// bound of 60 s that is any throughput below 273 KiB/s (a Bursting EFS of
// less than 5.5 GiB once its credits are spent), and with 32 large files
// copied at once and shared fairly, 32 x 16 MiB / throughput (below
// 8.5 MiB/s). Scaled down here: a 2 s bound (allowed: 1s..1h) and 4 MiB/s.
// The file system answers every probe at once and moves 4 MiB every
// second, yet the takeover exits 7, and so does every retry: the copy
// starts afresh each time, so the node never starts. A step is now at most
// 1 MiB.
func TestProgressWatchdogLetsASlowButAnsweringFileSystemFinish(t *testing.T) {
	if err := efsfs.Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no FUSE under CI=true: %v", err)
		}
		t.Skipf("SKIPPED, no FUSE: %v", err)
	}
	base := t.TempDir()
	backing, mnt := filepath.Join(base, "backing"), filepath.Join(base, "mnt")
	for _, d := range []string{backing, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	root, err := fs.NewLoopbackRoot(backing)
	if err != nil {
		t.Fatal(err)
	}
	raw := &throttledFS{RawFileSystem: fs.NewNodeFS(root, &fs.Options{}), rate: 4 << 20}
	srv, err := fuse.NewServer(raw, mnt, &fuse.MountOptions{DirectMount: true, DirectMountStrict: true,
		AllowOther: true, Options: []string{"default_permissions"}, FsName: "throttled", Name: "throttled",
		MaxBackground: 64, DisabledCapabilities: fuse.CAP_PASSTHROUGH})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for range 50 {
			if srv.Unmount() == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	c := newCluster(t, s3test.StartVersity(t), 1)
	v1 := c.deadHolderOfV1(t, backing)
	// One 24 MiB file (written to the backing directory directly): with
	// 16 MiB steps the first took 4 s at 4 MiB/s, past the 2 s bound.
	if err := os.WriteFile(filepath.Join(v1, "segment"), make([]byte, 24<<20), 0o640); err != nil {
		t.Fatal(err)
	}
	probeStart := time.Now()
	if _, err := os.ReadDir(mnt); err != nil {
		t.Fatal(err)
	}
	t.Logf("a probe of the data root answers in %v", time.Since(probeStart))
	tk := c.runTask("taker", "NODEID_DATA_ROOT="+mnt, "NODEID_FS_TIMEOUT=2s")
	select {
	case <-tk.done:
		t.Fatalf("the takeover exited %d on a file system that answered every call and moved 4 MiB/s (want: the copy completes, slowly):\n%s",
			tk.code, tail(tk.out.String(), 2500))
	case <-time.After(40 * time.Second):
		t.Fatalf("no exit within 40 s:\n%s", tail(tk.out.String(), 2500))
	case <-func() chan struct{} {
		ch := make(chan struct{})
		go func() {
			for {
				if b, err := os.ReadFile(tk.report); err == nil && len(b) > 0 {
					close(ch)
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
		return ch
	}():
		t.Logf("the command started")
	}
}
