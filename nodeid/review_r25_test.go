package nodeid_test

import (
	"context"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/camunda"
	"github.com/nodeid/nodeid/internal/s3test"
)

// Review r25: the peer cache remembers "this ID's lease listed our version"
// per node ID, not per holder. In a mixed cluster (docs/migration.md) node
// 0's Camunda broker A learns our version, then crashes; broker B takes node
// 0 after expiry with mappings that do not list us (Camunda fills them from
// cluster membership). Before issue 25 the holder stayed not ready until
// B's lease listed our version (or ReadinessTimeout); with the cache it
// turns ready as soon as node 1 confirms, while B, live, does not know us.
func TestReadinessIsNotCarriedOverToTheNextHolderOfAPeerID(t *testing.T) {
	srv := s3test.NewFake(t)
	ctx := context.Background()
	client := camundaBucket(t, srv, 3)
	broker := func(task string) *camunda.Broker {
		return &camunda.Broker{Client: client, Bucket: srv.Bucket, TaskID: task, N: 3, LeaseDuration: 2 * time.Second}
	}
	a, c, x := broker("camunda-a"), broker("camunda-c"), broker("camunda-x")
	for want, b := range []*camunda.Broker{a, c, x} {
		if id, _ := acquireBroker(t, b, 5*time.Second); id != want {
			t.Fatalf("%s took node %d, want %d", b.TaskID, id, want)
		}
	}
	stopA, _, stopX := runBroker(t, a), runBroker(t, c), runBroker(t, x)
	if err := stopX(); err != nil { // node 2's broker crashes
		t.Fatal(err)
	}

	cfg := fastConfig(t, "nodeid-new", 3, nil)
	cfg.AllowedIDs = []int{2}
	cfg.ReadinessTimeout = time.Minute
	cfg.MappingsRefreshInterval = 200 * time.Millisecond
	p := newProvider(t, rootRepo(t, srv), cfg)
	inst := acquire(t, p, 15*time.Second)
	if inst.ID != 2 || p.PreviousGracefullyShutdown() {
		t.Fatalf("took %v graceful=%v, want an ungraceful takeover of node 2", inst, p.PreviousGracefullyShutdown())
	}

	// A learns our version (gossip) and writes it at its next renewal.
	a.SetKnown(map[int32]int64{0: 1, 2: int64(inst.Version)})
	time.Sleep(1500 * time.Millisecond)
	if p.Ready() {
		t.Fatal("ready although camunda-c does not know our version")
	}

	// A crashes; B takes node 0 after its expiry; its mappings list only itself.
	if err := stopA(); err != nil {
		t.Fatal(err)
	}
	b := broker("camunda-b")
	if id, v := acquireBroker(t, b, 10*time.Second); id != 0 || v != 2 {
		t.Fatalf("camunda-b took node %d v%d, want node 0 v2", id, v)
	}
	runBroker(t, b)
	// Now C learns our version too.
	c.SetKnown(map[int32]int64{1: 1, 2: int64(inst.Version)})

	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if p.Ready() {
			s, _, err := camunda.Get(ctx, client, srv.Bucket, 0, 0)
			t.Fatalf("ready while node 0's live holder %s (v%d) does not list node 2 v%d: %+v, %v", b.TaskID, 2, inst.Version, s, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
