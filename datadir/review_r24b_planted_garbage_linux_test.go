package datadir

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Review r24b, invariant 3 (nothing deleted that is not positively ours).
// judgeGarbage calls a directory under a garbage name ours when it holds
// "nothing but our own small files", but judges them by name and type
// only: neither size nor content. A tenant's directory under such a name,
// holding a regular file of its own data that happens to use one of our
// file names (here 1 MiB that is no marker, and another cluster's claimed
// in-progress file), is deleted by the next Collect.
func TestReviewR24bPlantedGarbageJudgedOursByNamesAlone(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{OwnerName: `{"bucket":"bucket-a","prefix":"prod/"}`})
	makeVersion(t, root, 0, 3, map[string]string{"data": "valid"}, 3)
	node := filepath.Join(root, "node-0")
	planted := map[string]map[string]string{
		".v1.20.nodeid-removing": {markerAsideName: strings.Repeat("tenant data, not a marker\n", 40000)},
		".v2.21.nodeid-removing": {claimName: `{"version":2,"bucket":"bucket-b","prefix":"other/","tenure":"t"}`},
	}
	for name, files := range planted {
		writeFiles(t, filepath.Join(node, name), files)
	}
	removed, err := Collect(context.Background(), root, inst(0, 3), Options{Cluster: clusterA, Logger: quiet})
	t.Logf("removed %v (%v)", removed, err)
	for name, files := range planted {
		for f := range files {
			if _, err := os.Lstat(filepath.Join(node, name, f)); err != nil {
				t.Errorf("%s/%s (not a marker or in-progress file of ours) was deleted: %v", name, f, err)
			}
		}
	}
}
