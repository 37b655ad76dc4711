//go:build linux

package efsfs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestLatencyAndCounts(t *testing.T) {
	f := MountT(t, Profile{Meta: 20 * time.Millisecond, Fsync: 20 * time.Millisecond})
	start := time.Now()
	for i := range 5 {
		if err := os.Mkdir(filepath.Join(f.Dir, "d"+string(rune('0'+i))), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("5 mkdirs took %v, want at least 5 x 20 ms", d)
	}
	if n := f.Count(OpMkdir); n != 5 {
		t.Errorf("mkdir count %d, want 5", n)
	}
	if _, err := os.Stat(filepath.Join(f.Backing, "d4")); err != nil {
		t.Errorf("not looped back: %v", err)
	}
}

func TestFaults(t *testing.T) {
	f := MountT(t, Profile{})
	write := func(name string, n int) error {
		return os.WriteFile(filepath.Join(f.Dir, name), make([]byte, n), 0o644)
	}

	f.Inject(Fault{Errno: syscall.ENOSPC, AfterBytes: 10000})
	if err := write("a", 8000); err != nil {
		t.Fatalf("below the limit: %v", err)
	}
	if err := write("b", 8000); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("past the byte limit: %v, want ENOSPC", err)
	}
	f.Inject(Fault{Errno: syscall.EIO, AfterOps: 1, Ops: []Op{OpCreate}})
	if err := write("c", 1); err != nil {
		t.Fatalf("first create: %v", err)
	}
	if err := write("d", 1); !errors.Is(err, syscall.EIO) {
		t.Errorf("second create: %v, want EIO", err)
	}
	f.Inject(Fault{Errno: syscall.EIO, Ops: []Op{OpLink}})
	if err := os.Link(filepath.Join(f.Dir, "a"), filepath.Join(f.Dir, "a2")); !errors.Is(err, syscall.EIO) {
		t.Errorf("link: %v, want EIO", err)
	}
	f.Clear()
	if err := os.Link(filepath.Join(f.Dir, "a"), filepath.Join(f.Dir, "a2")); err != nil {
		t.Errorf("link after Clear: %v", err)
	}

	hung := f.HangFsync()
	done := make(chan error, 1)
	go func() {
		fd, err := os.OpenFile(filepath.Join(f.Dir, "a"), os.O_WRONLY, 0)
		if err == nil {
			err = fd.Sync()
			fd.Close()
		}
		done <- err
	}()
	select {
	case <-hung:
	case <-time.After(10 * time.Second):
		t.Fatal("fsync never reached the file system")
	}
	select {
	case err := <-done:
		t.Fatalf("fsync returned while hanging: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	f.Release()
	if err := <-done; err != nil {
		t.Errorf("fsync after Release: %v", err)
	}
}

// HangAll blocks every operation, a lookup or readdir as much as an fsync,
// until Release.
func TestHangAllBlocksEveryOperationUntilRelease(t *testing.T) {
	f := MountT(t, Profile{})
	if err := os.WriteFile(filepath.Join(f.Dir, "a"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	hung := f.HangAll()
	done := make(chan error, 1)
	go func() {
		_, err := os.ReadDir(f.Dir)
		done <- err
	}()
	select {
	case <-hung:
	case <-time.After(10 * time.Second):
		t.Fatal("readdir never reached the file system")
	}
	select {
	case err := <-done:
		t.Fatalf("readdir returned while hanging: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	f.Release()
	if err := <-done; err != nil {
		t.Errorf("readdir after Release: %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.Dir, "b")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stat after Release: %v, want not exist", err)
	}
}
