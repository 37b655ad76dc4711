package nodeid_test

import (
	"context"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// durationlessPeer writes node id as held by task, at version v, by a
// writer that recorded no lease duration (the object no longer says how
// long its holder lasts): waiters must then assume the cluster's.
func durationlessPeer(t *testing.T, srv *s3test.Server, id int, task string, v nodeid.Version) {
	t.Helper()
	l := nodeid.Lease{TaskID: task, Instance: nodeid.NodeInstance{ID: id, Version: v},
		Expires: time.Now().Add(time.Minute), Nonce: "n-" + task, Acquirable: true}
	body, meta := l.Encode()
	// Deleted first: gofakes3 keeps metadata keys of the object a PUT
	// replaces, so the old leaseduration would survive.
	deleteRaw(t, srv, nodeid.LeaseKey(testPrefix, id))
	putRaw(t, srv, nodeid.LeaseKey(testPrefix, id), string(body), meta)
}

// Issue 23.6: the cluster marker records L = 20 s, this task has 2 s, and
// node 1's object records no duration. Written 4 s ago, its holder may
// still be valid: the peer table (ReadPeers and the holder's refresh) shows
// it held, and readiness does not count it as a peer that knows. On main
// these left the marker's duration out and judged it by 2 s: expired.
func TestPeersAndReadinessAssumeTheClustersLeaseDuration(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		ctx := context.Background()
		repo := newRepo(t, srv, "")
		if err := nodeid.Initialize(ctx, repo, 2, "boot", 20*time.Second); err != nil {
			t.Fatal(err)
		}
		if _, err := nodeid.ForceRelease(ctx, repo, 0, 1, "operator"); err != nil {
			t.Fatal(err) // node 0 released by force: its taker is not ready at once
		}
		durationlessPeer(t, srv, 1, "peer", 1)
		time.Sleep(4 * time.Second) // past 2 s + 1 s by S3's clock, well within 20 s

		read, err := nodeid.ReadPeers(ctx, repo, 2, 2*time.Second)
		if err != nil || len(read) != 2 || read[1].State != nodeid.PeerHeld {
			t.Errorf("ReadPeers: %+v, %v; want node 1 held (the cluster's L is 20 s)", read, err)
		}

		cfg := fastConfig(t, "holder", 2, nil)
		cfg.AllowedIDs = []int{0}
		cfg.ReadinessTimeout = time.Minute
		holder := newProvider(t, repo, cfg)
		if inst := acquire(t, holder, 10*time.Second); inst.ID != 0 {
			t.Fatalf("holder got %v, want node 0", inst)
		}
		waitFor(t, 5*time.Second, "the holder's first peer table", func() bool { return len(holder.Peers()) == 2 })
		if got := holder.Peers()[1]; got.State != nodeid.PeerHeld {
			t.Errorf("the holder's peer table shows node 1 %s, want held", got.State)
		}
		time.Sleep(time.Second) // more refresh rounds (R/2 apart until ready)
		if holder.Ready() {
			t.Error("ready although node 1's holder may be alive and does not know our version")
		}
	})
}
