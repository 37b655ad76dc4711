package datadir

import (
	"os"
	"path/filepath"
	"testing"
)

// After a graceful release every file is hard-linked; a non-root preparer
// (nodeid-init run as the broker's user, or a root-squashing EFS export)
// cannot link a file of another user that it may not write
// (fs.protected_hardlinks, on by default: EPERM), e.g. a 0644 file an
// entrypoint running as root left in the data directory. Failing there
// would fail every preparation for good (nodeid-init gives the lease back
// as graceful, the next holder links again); that file is copied, as
// cp -a would, and the others are still linked.
func TestGracefulLinkOfAnotherUsersFileFallsBackToACopy(t *testing.T) {
	if work, child := nobodyDir(t); child {
		root := filepath.Join(work, "root")
		dir, res, err := Prepare(t.Context(), root, inst(0, 2), Options{PreviousGraceful: true, Logger: quiet})
		if err != nil {
			t.Fatalf("graceful Prepare as uid %d of a tree holding a root-owned 0644 file: %v", os.Getuid(), err)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "written-by-root")); err != nil || string(b) != "root" {
			t.Errorf("written-by-root in the copy: %q, %v (res %+v)", b, err, res)
		}
		v1 := filepath.Join(root, "node-0", "v1")
		if sameInode(t, v1, dir, "written-by-root") || !sameInode(t, v1, dir, "data") || res.FilesCopied != 1 || res.FilesLinked != 1 {
			t.Errorf("want written-by-root copied and data linked; res %+v", res)
		}
		return
	}
	if os.Getuid() != 0 || readSysctl("fs/protected_hardlinks") != "1" {
		t.Skip("needs root and fs.protected_hardlinks=1")
	}
	asNobody(t, "TestGracefulLinkOfAnotherUsersFileFallsBackToACopy", func(work string) {
		root := filepath.Join(work, "root")
		v1 := makeVersion(t, root, 0, 1, map[string]string{"data": "broker", "written-by-root": "root"}, 1)
		for _, p := range []string{root, filepath.Join(root, "node-0"), v1, filepath.Join(v1, "data"), filepath.Join(v1, MarkerName)} {
			if err := os.Chown(p, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func readSysctl(name string) string {
	b, _ := os.ReadFile("/proc/sys/" + name)
	return string(b[:max(len(b)-1, 0)])
}
