package datadir

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/nodeid/nodeid/internal/efsfs"
	"github.com/nodeid/nodeid/node"
)

// fixedDirModeFS is a loopback whose mkdir ignores the mode asked for and
// makes every directory 0755, as a file system mounted with a fixed
// directory mode does (CIFS dir_mode=0755, vfat/exfat dmask=022, s3fs and
// other FUSE mounts with a umask option).
type fixedDirModeFS struct{ fuse.RawFileSystem }

func (f *fixedDirModeFS) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	in.Mode, in.Umask = 0o755, 0
	return f.RawFileSystem.Mkdir(c, in, name, out)
}

// mountFixedDirMode mounts a fixedDirModeFS over a new directory for the test.
func mountFixedDirMode(t *testing.T) string {
	t.Helper()
	if err := efsfs.Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("cannot mount FUSE under CI=true: %v", err)
		}
		t.Skipf("SKIPPED, no FUSE here: %v", err)
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
	srv, err := fuse.NewServer(&fixedDirModeFS{fs.NewNodeFS(root, &fs.Options{})}, mnt, &fuse.MountOptions{
		DirectMount: true, DirectMountStrict: true, AllowOther: true,
		Options: []string{"default_permissions"}, FsName: "fixeddirmode", Name: "fixeddirmode",
	})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Unmount() })
	return mnt
}

// Review r24f (liveness; the brief's "a file system that ignores requested
// modes"): openSubdir makes each target subdirectory with mkdirat(0700) and
// checkFreshSubdir then refuses it as "replaced in the target right after it
// was made" (ErrValidation) if its mode has any bit beyond 0700 and setgid.
// On a file system whose directories get a fixed mode, every directory the
// copy makes has 0755: every preparation from a source with a subdirectory
// fails, graceful or not, at every retry, so the node never starts again,
// although nothing was replaced and the mode is not ours to choose there.
//
// Schedule: v1 (valid, with a subdirectory "data") on a fixed-dir-mode
// mount; Prepare v2 after a graceful release. Wanted: v2 prepared.
func TestReviewR24fFixedDirModeFileSystemFailsEveryPreparationWithASubdirectory(t *testing.T) {
	root := mountFixedDirMode(t)
	c := Cluster{Bucket: "b", Prefix: "p/"}
	v1, _, err := Prepare(context.Background(), root, node.Instance{ID: 0, Version: 1}, Options{Cluster: c, Tenure: "t1"})
	if err != nil {
		t.Fatalf("preparing v1 on the fixed-mode mount: %v", err)
	}
	if err := os.Mkdir(filepath.Join(v1, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(v1, "data")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("setup: the mount does not fix the directory mode: %v %v", fi.Mode(), err)
	}
	if err := os.WriteFile(filepath.Join(v1, "data", "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, graceful := range []bool{true, false} {
		v := node.Version(2)
		if !graceful {
			v = 3 // v2 failed above, and is removed
		}
		_, _, err := Prepare(context.Background(), root, node.Instance{ID: 0, Version: v}, Options{Cluster: c, Tenure: "t", PreviousGraceful: graceful})
		if err != nil {
			t.Errorf("graceful=%t: Prepare v%d from v1 with one subdirectory on a file system with a fixed directory mode: %v", graceful, v, err)
		}
	}
}
