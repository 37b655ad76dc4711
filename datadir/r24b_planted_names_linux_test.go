package datadir

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Review r24b, availability: names a tenant can plant do not stop a
// removal for good. A directory under v1's garbage name (.v1.<inode>...)
// makes the no-replace rename fail (EEXIST): another, random, garbage name
// is taken, and the planted directory (not ours) is left. Directories
// planted under the marker's names aside inside a version being removed
// (where its marker is renamed, where a preparer writes it aside) are that
// version's content like any other: removed with it.
func TestR24bPlantedNamesDoNotBlockARemoval(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{OwnerName: `{"bucket":"bucket-a","prefix":"prod/"}`})
	v1 := makeVersion(t, root, 0, 1, map[string]string{"data": "1", removingName + "/x": "planted", markerAsideName + "/y": "planted"}, 1)
	v2 := makeVersion(t, root, 0, 2, map[string]string{"data": "2", removingName + "/x": "planted"}, 2)
	makeVersion(t, root, 0, 3, map[string]string{"data": "3"}, 3)
	makeVersion(t, root, 0, 4, map[string]string{"data": "4"}, 4)
	planted := garbagePathOf(t, v1, 1)
	writeFiles(t, planted, map[string]string{"tenant": "not ours"})
	removed, err := Collect(context.Background(), root, inst(0, 4), Options{Cluster: clusterA, Keep: 2, Logger: quiet})
	if err != nil {
		t.Errorf("Collect: %v", err)
	}
	t.Logf("removed %v", removed)
	for _, v := range []string{v1, v2} {
		if exists(t, v) {
			t.Errorf("%s left in the versions", v)
		}
	}
	if b, err := os.ReadFile(filepath.Join(planted, "tenant")); err != nil || string(b) != "not ours" {
		t.Errorf("the directory planted under v1's garbage name: %q, %v; want it left", b, err)
	}
	entries, err := os.ReadDir(filepath.Dir(v1))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, garbageSuffix) && filepath.Join(filepath.Dir(v1), n) != planted {
			t.Errorf("%s left: the removal did not finish", n)
		}
	}
	if v, ok := parseGarbageName(altGarbageName(1, 77)); !ok || v != 1 {
		t.Errorf("%s is not read as v1's garbage name", altGarbageName(1, 77))
	}
}
