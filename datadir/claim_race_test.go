package datadir

import (
	"context"
	"log/slog"
	"sync"
	"testing"
)

// Tasks of one cluster start together on a root nobody has claimed yet (the
// Camunda takeover of docs/migration.md). Each judges the root unclaimed;
// one wins the claim, the others find it claimed by their own cluster.
// docs/datadir.md ("Ownership"): only the preparation that claimed the root
// skips garbage collection. Seen under load in
// TestCamundaClusterIsTakenOverAndHandedBack: a loser also logged "this one
// claimed the data root" and kept node-0/v1.
func TestOnlyThePreparationThatClaimedTheRootSkipsGC(t *testing.T) {
	const nodes = 4
	for round := range 30 {
		root := t.TempDir()
		for id := range nodes {
			makeVersion(t, root, id, 1, map[string]string{"a": "alpha"}, 1)
			makeVersion(t, root, id, 2, map[string]string{"a": "alpha"}, 2)
		}
		recs := make([]*recorder, nodes)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for id := range nodes {
			recs[id] = &recorder{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if _, _, err := Prepare(context.Background(), root, inst(id, 3), Options{Logger: slog.New(recs[id]), Cluster: clusterA}); err != nil {
					t.Errorf("node %d: %v", id, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		claimed, skipped := 0, 0
		for _, r := range recs {
			if r.has("data root claimed for this cluster") {
				claimed++
			}
			if r.has("garbage collection skipped until the next preparation: this one claimed the data root") {
				skipped++
			}
		}
		if claimed != 1 || skipped != 1 {
			t.Fatalf("round %d: %d preparations claimed the root, %d skipped GC as its claimer; want 1 and 1", round, claimed, skipped)
		}
	}
}
