package datadir

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/nodeid/nodeid/nodeid"
)

// Collect on a root without an ownership file: the root may be another
// cluster's (an earlier release's, or Camunda's) still in use. Prepare, for
// that reason, runs no GC when it claims a root ("nothing of it must be
// deleted before that cluster's next start has refused it"), but Collect,
// which never claims a root, collects it all the same: checkOwner's claim
// result is ignored, and the other cluster's valid versions beyond Keep go.
func TestReviewCollectOnAnUnownedRootDeletesNothing(t *testing.T) {
	root := t.TempDir()
	for v := nodeid.Version(5); v <= 8; v++ {
		makeVersion(t, root, 0, v, map[string]string{"log/segment": "cluster B's data at v" + itoa(v)}, v)
	}
	node := filepath.Join(root, "node-0")
	before := snapshotTree(t, node)
	removed, err := Collect(context.Background(), root, inst(0, 9), Options{Cluster: clusterA, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 0 {
		t.Errorf("Collect for cluster A on an unowned root removed %v (another cluster's valid versions)", removed)
	}
	equalMaps(t, snapshotTree(t, node), before)
}
