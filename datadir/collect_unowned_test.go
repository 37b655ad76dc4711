package datadir

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/nodeid/nodeid/nodeid"
)

// Collect on a root without an ownership file: the root may be another
// cluster's (an earlier release's, or Camunda's) still in use. Prepare runs
// no GC when it claims a root for that reason, and Collect, which never
// claims one, deletes nothing there either.
func TestCollectOnAnUnownedRootDeletesNothing(t *testing.T) {
	root := t.TempDir()
	for v := nodeid.Version(5); v <= 8; v++ {
		makeVersion(t, root, 0, v, map[string]string{"log/segment": "cluster B's data at v" + itoa(v)}, v)
	}
	node := filepath.Join(root, "node-0")
	before := snapshotTree(t, node)
	rec := &recorder{}
	removed, err := Collect(context.Background(), root, inst(0, 9), Options{Cluster: clusterA, Logger: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 0 {
		t.Errorf("Collect for cluster A on an unowned root removed %v (another cluster's valid versions)", removed)
	}
	equalMaps(t, snapshotTree(t, node), before)
	if !rec.has("garbage collection skipped: the data root is not claimed by this cluster") {
		t.Error("the skipped collection was not logged")
	}
	if exists(t, filepath.Join(root, OwnerName)) {
		t.Errorf("Collect wrote %s", OwnerName)
	}
}
