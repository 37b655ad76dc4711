package datadir

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Schedules from an adversarial review in which another task with our uid
// plants entries in the data root (it is shared storage: treat it as
// hostile). Each failed before its fix.

// GC turns a valid old version into "our leftover" by writing
// .nodeid-preparing with O_CREATE|O_TRUNC (removeValid -> writeInProgress).
// os.Root follows a symlink inside node-N, so a symlink planted as
// vJ/.nodeid-preparing redirects that truncating write to any file of any
// other version of the node, here the data of the version just prepared.
//
// Schedule: a tenant plants node-0/v1/.nodeid-preparing -> ../v3/data.log
// (v1 is a valid old version). A task prepares v3 from v2 with Keep 1;
// its GC removes v1 and, before that, overwrites v3/data.log.
func TestGCDoesNotWriteThroughAPlantedInProgressSymlink(t *testing.T) {
	root := t.TempDir()
	v1 := makeVersion(t, root, 0, 1, map[string]string{"data.log": "old v1"}, 1)
	makeVersion(t, root, 0, 2, map[string]string{"data.log": "precious data of v2"}, 2)
	if err := os.Symlink("../v3/data.log", filepath.Join(v1, PreparingName)); err != nil {
		t.Fatal(err)
	}

	dir, _ := mustPrepare(t, root, inst(0, 3), Options{Keep: 1, Cluster: clusterA})

	b, err := os.ReadFile(filepath.Join(dir, "data.log"))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "precious data of v2" {
		t.Errorf("GC of v1 wrote into the live directory: %s/data.log = %q, want %q", dir, b, "precious data of v2")
	}
}

// Same, with Collect on its own, and with a hard link as well as a symlink:
// the file overwritten would be the data of the current version, which
// Collect promises never to touch. The planted entry is replaced, not
// written through, and v1 and v2 are
// still removed.
func TestCollectDoesNotWriteThroughAPlantedInProgressFile(t *testing.T) {
	for _, how := range []string{"symlink", "hard link"} {
		t.Run(how, func(t *testing.T) {
			root := t.TempDir()
			v1 := makeVersion(t, root, 0, 1, map[string]string{"data.log": "old v1"}, 1)
			v2 := makeVersion(t, root, 0, 2, map[string]string{"data.log": "v2"}, 2)
			v3 := makeVersion(t, root, 0, 3, map[string]string{"data.log": "current v3"}, 3)
			var err error
			if how == "symlink" {
				err = os.Symlink("../v3/data.log", filepath.Join(v1, PreparingName))
			} else {
				err = os.Link(filepath.Join(v3, "data.log"), filepath.Join(v1, PreparingName))
			}
			if err != nil {
				t.Fatal(err)
			}
			removed, err := Collect(context.Background(), root, inst(0, 3), Options{Keep: 1, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(v3, "data.log"))
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != "current v3" {
				t.Errorf("Collect(current v3) overwrote %s/data.log: %q", v3, b)
			}
			if want := []string{v2, v1}; !slices.Equal(removed, want) {
				t.Errorf("removed %v, want %v", removed, want)
			}
		})
	}
}
