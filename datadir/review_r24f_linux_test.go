package datadir

import (
	"context"
	"os"
	"path/filepath"
	"slices"
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

// Review r24f (invariant 5: no write, chmod or delete outside the data
// root): removeGarbage empties its garbage directory through the
// descriptor d for up to three rounds, each listing d afresh and removing
// whatever it holds (removeAllAt: chmod u+rwx, then delete), and checks
// that the garbage name still leads to d only at the rmdir. r24e's fix
// (0e89e83) stops the keeper's write-back once the name no longer leads to
// d, but not the rounds before it. A tenant that renames the garbage
// directory out of the data root while it is being emptied has every
// entry made in it there afterwards (by anyone: it is an ordinary
// directory outside the data root now) chmodded and deleted by our GC.
//
// Schedule: v1, v2 valid, Collect at v2 with Keep 1; v1 is renamed to its
// garbage name and listed (testHookGarbageListed); then the tenant renames
// it to <outside>/moved and someone outside the data root creates
// precious/keep in it, precious read-only (0500). Round 1 removes v1's
// content, finds precious, not alone: round 2 lists precious and removes
// it, making it writable first. Wanted: nothing under <outside> changed.
func TestReviewR24fGarbageMovedOutOfTheDataRootIsEmptiedThere(t *testing.T) {
	dir := t.TempDir()
	root, outside := filepath.Join(dir, "root"), filepath.Join(dir, "outside")
	for _, d := range []string{root, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	makeVersion(t, root, 0, 1, map[string]string{"a/f": "1"}, 1)
	makeVersion(t, root, 0, 2, map[string]string{"a/f": "2"}, 2)
	nodeDir := filepath.Dir(Dir(root, inst(0, 1)))
	moved := filepath.Join(outside, "moved")
	precious := filepath.Join(moved, "precious")
	setHook(t, &testHookGarbageListed, func(name string) {
		if _, err := os.Stat(moved); err == nil {
			return // once
		}
		if err := os.Rename(filepath.Join(nodeDir, name), moved); err != nil {
			t.Error(err)
			return
		}
		if err := os.Mkdir(precious, 0o700); err != nil {
			t.Error(err)
			return
		}
		if err := os.WriteFile(filepath.Join(precious, "keep"), []byte("not yours"), 0o600); err != nil {
			t.Error(err)
		}
		if err := os.Chmod(precious, 0o500); err != nil {
			t.Error(err)
		}
	})
	_, err := Collect(context.Background(), root, inst(0, 2), Options{Keep: 1, Logger: quiet})
	testHookGarbageListed = nil
	t.Logf("Collect: %v", err)
	if _, serr := os.Stat(moved); serr != nil {
		t.Fatalf("setup: the hook did not move the garbage directory out: %v", serr)
	}
	fi, serr := os.Stat(precious)
	switch {
	case serr != nil:
		t.Errorf("%s, made outside the data root after the garbage directory was moved there, was deleted by Collect: %v", precious, serr)
	case fi.Mode().Perm() != 0o500:
		t.Errorf("%s outside the data root was chmodded by Collect: mode %v, want 0500", precious, fi.Mode().Perm())
	}
	if _, serr := os.Stat(filepath.Join(precious, "keep")); serr != nil && fi != nil {
		t.Errorf("%s/keep outside the data root was deleted by Collect: %v", precious, serr)
	}
}

// Review r24f (invariant 5, the copy's side of the same hole): Prepare
// writes the whole copy, then the marker, through the descriptor of its
// target and of the directories it made, and never looks again whether
// the target's name still leads there. A tenant that renames vK out of the
// data root once the copy started has every later file, directory and the
// marker written outside the data root, and Prepare reports success with
// dir naming a path that is no longer what it prepared.
//
// Schedule: v1 valid with files f0..f9; Prepare v2 (ungraceful: copies);
// before the first file is copied (testHookFile) the tenant renames
// node-0/v2 to <outside>/moved. Wanted: nothing created in <outside>/moved
// after the move (Prepare fails instead, or stops writing).
func TestReviewR24fTargetMovedOutOfTheDataRootIsWrittenThere(t *testing.T) {
	dir := t.TempDir()
	root, outside := filepath.Join(dir, "root"), filepath.Join(dir, "outside")
	for _, d := range []string{root, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{}
	for i := range 10 {
		files[filepath.Join("d", string(rune('a'+i)))] = "data"
	}
	makeVersion(t, root, 0, 1, files, 1)
	target := Dir(root, inst(0, 2))
	moved := filepath.Join(outside, "moved")
	var atMove []string
	setHook(t, &testHookFile, func(rel string) {
		if atMove != nil {
			return
		}
		if err := os.Rename(target, moved); err != nil {
			t.Error(err)
			return
		}
		atMove = listTree(t, moved)
	})
	got, _, err := Prepare(context.Background(), root, inst(0, 2), Options{Workers: 1, Logger: quiet})
	testHookFile = nil
	t.Logf("Prepare: %q, %v", got, err)
	if atMove == nil {
		t.Fatal("setup: the hook never ran")
	}
	after := listTree(t, moved)
	var written []string
	for _, p := range after {
		if !slices.Contains(atMove, p) {
			written = append(written, p)
		}
	}
	if len(written) > 0 {
		t.Errorf("written outside the data root after the target was moved there (%s): %v", moved, written)
	}
}

// listTree lists the paths below dir, relative to it.
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel, _ := filepath.Rel(dir, p); rel != "." {
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
