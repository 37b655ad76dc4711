package nodeid_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// readPeersByGet is ReadPeers as it was before the tenure objects: one
// listing and a GET of every listed lease. It is the oracle: the table
// ReadPeers builds from the listings must be the one it gives.
func readPeersByGet(ctx context.Context, repo nodeid.Repository, size int, lease time.Duration) ([]nodeid.Peer, error) {
	listing, err := repo.List(ctx)
	if err != nil {
		return nil, err
	}
	marker, err := repo.Marker(ctx)
	if err != nil && !errors.Is(err, nodeid.ErrNotFound) {
		return nil, err
	}
	peers := map[int]nodeid.Peer{}
	for _, s := range listing.Slots {
		rec, err := repo.Get(ctx, s.ID)
		switch {
		case errors.Is(err, nodeid.ErrNotFound):
			peers[s.ID] = nodeid.Peer{ID: s.ID, State: nodeid.PeerMissing}
		case errors.Is(err, nodeid.ErrCorruptLease):
			peers[s.ID] = nodeid.Peer{ID: s.ID, State: nodeid.PeerCorrupt}
		case err != nil:
			return nil, err
		default:
			peers[s.ID] = nodeid.PeerOfForTest(rec, lease, marker.LeaseDuration)
		}
	}
	for id := range size {
		if _, ok := peers[id]; !ok {
			peers[id] = nodeid.Peer{ID: id, State: nodeid.PeerMissing}
		}
	}
	out := make([]nodeid.Peer, 0, len(peers))
	for _, p := range peers {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b nodeid.Peer) int { return a.ID - b.ID })
	return out, nil
}

// settableClock is a server clock a test moves by hand.
type settableClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *settableClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *settableClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// heldBy is a held lease of id at v as this tool writes it.
func heldBy(task string, id int, v nodeid.Version, addr string) nodeid.Lease {
	return nodeid.Lease{TaskID: task, Instance: nodeid.NodeInstance{ID: id, Version: v},
		Expires: time.Now().Add(time.Hour), Duration: 2 * time.Second, Nonce: fmt.Sprintf("n-%s-%d-%d", task, id, v),
		Acquirable: true, Address: addr, KnownVersions: nodeid.VersionMappings{0: 1, id: v}}
}

// ReadPeers builds from the lease and tenure listings the table that
// reading every lease gives, in every state a cluster's objects can be in,
// and reads (GETs) only the slots the tenure objects do not explain.
func TestReadPeersFromListingsEqualsReadingEveryLease(t *testing.T) {
	clock := &settableClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	srv := s3test.NewFake(t, s3test.WithServerClock(clock.Now))
	ctx := context.Background()
	ops := &opCounts{}
	repo := newS3Repo(t, srv, "", testPrefix, 5*time.Second, countingOps(ops))
	const lease = 2 * time.Second
	put := func(l nodeid.Lease) {
		body, meta := l.Encode()
		putRaw(t, srv, nodeid.LeaseKey(testPrefix, l.Instance.ID), string(body), meta)
	}
	tenure := func(l nodeid.Lease) {
		t.Helper()
		if err := repo.CreateTenure(ctx, nodeid.TenureObject{ID: l.Instance.ID, Version: l.Instance.Version, LeaseDuration: l.Duration, Address: l.Address, TaskID: l.TaskID}); err != nil {
			t.Fatal(err)
		}
	}
	heldWithTenure := func(l nodeid.Lease) { put(l); tenure(l) }

	if err := nodeid.Initialize(ctx, repo, 14, "init", lease); err != nil {
		t.Fatal(err)
	}
	// 12: held, then marked unusable by a scale-down to 12 (a held mark);
	// 13: released when scaled down.
	heldWithTenure(heldBy("task-12", 12, 3, "10.0.0.12:26502"))
	if err := nodeid.Scale(ctx, repo, 12, "scaler", lease); err != nil {
		t.Fatal(err)
	}
	// 2: held by a holder that stopped an hour before the listing.
	heldWithTenure(heldBy("task-2", 2, 5, "10.0.0.2:26502"))
	clock.set(clock.Now().Add(time.Hour))

	// 0, 1: held, with their tenure objects (one with no address).
	heldWithTenure(heldBy("task-0", 0, 7, "10.0.0.1:26502"))
	heldWithTenure(heldBy("task-1", 1, 2, ""))
	// 3: released by its holder after its tenure object was written.
	heldWithTenure(heldBy("task-3", 3, 4, "10.0.0.3:26502"))
	put(nodeid.Lease{Instance: nodeid.NodeInstance{ID: 3, Version: 4}, Nonce: "r3", Acquirable: true, Writer: "task-3"})
	// 4: its object deleted; its tenure object is left.
	heldWithTenure(heldBy("task-4", 4, 2, "10.0.0.4:26502"))
	deleteRaw(t, srv, nodeid.LeaseKey(testPrefix, 4))
	// 5: overwritten with garbage after its tenure; 6: garbage, no tenure.
	heldWithTenure(heldBy("task-5", 5, 2, "10.0.0.5:26502"))
	putRaw(t, srv, nodeid.LeaseKey(testPrefix, 5), `{"not":"a lease"}`, map[string]string{"version": "2"})
	putRaw(t, srv, nodeid.LeaseKey(testPrefix, 6), "garbage", nil)
	// 7: a Camunda broker's lease; 8: a Camunda broker took the ID of a
	// nodeid holder whose tenure object is left.
	body, meta := foreignLease("camunda-7", 7, 3)
	putRaw(t, srv, nodeid.LeaseKey(testPrefix, 7), body, meta)
	heldWithTenure(heldBy("task-8", 8, 3, "10.0.0.8:26502"))
	body, meta = foreignLease("camunda-8", 8, 4)
	putRaw(t, srv, nodeid.LeaseKey(testPrefix, 8), body, meta)
	// 9: taken at version 6 by a holder whose tenure object is not written
	// yet: the newest tenure object is its predecessor's, version 5.
	heldWithTenure(heldBy("task-9a", 9, 5, "10.0.0.9:26502"))
	put(heldBy("task-9b", 9, 6, "10.0.0.99:26502"))
	// 10: recreated after a delete as an expiring placeholder at its
	// holder's version.
	heldWithTenure(heldBy("task-10", 10, 2, "10.0.0.10:26502"))
	put(heldBy("recreated-by:task-10", 10, 2, ""))
	// 11: released by Camunda (an empty body with metadata).
	heldWithTenure(heldBy("task-11", 11, 2, "10.0.0.11:26502"))
	putRaw(t, srv, nodeid.LeaseKey(testPrefix, 11), "", map[string]string{"taskid": "", "version": "2", "acquirable": "true"})
	// 15: an ID outside the cluster size, held, with its tenure object.
	heldWithTenure(heldBy("task-15", 15, 1, "10.0.0.15:26502"))

	want, err := readPeersByGet(ctx, repo, 12, lease)
	if err != nil {
		t.Fatal(err)
	}
	before := ops.snapshot()
	got, err := nodeid.ReadPeers(ctx, repo, 12, lease)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("ReadPeers from the listings:\n%+v\nreading every lease:\n%+v", got, want)
	}
	states := map[nodeid.PeerState]bool{}
	for _, p := range want {
		states[p.State] = true
	}
	for _, s := range []nodeid.PeerState{nodeid.PeerHeld, nodeid.PeerExpired, nodeid.PeerReleased, nodeid.PeerUnusable,
		nodeid.PeerMissing, nodeid.PeerCorrupt, nodeid.PeerNoHolder} {
		if !states[s] {
			t.Errorf("no peer is %s: the test does not set up the states it names: %+v", s, want)
		}
	}
	// Explained by their tenure objects: 0, 1, 2 and 15. Read: the other
	// ten listed slots, and the marker.
	after := ops.snapshot()
	if gets, lists := after["get"]-before["get"], after["list"]-before["list"]; gets != 11 || lists != 1 {
		t.Errorf("ReadPeers sent %d GETs and %d listings, want 11 (10 slots the tenure objects do not explain, the marker) and 1", gets, lists)
	}
}

// A cluster of 50 holders costs ReadPeers one listing and the marker's GET,
// no lease GET; reading every lease took 50. The leases are written as the
// holders write them (TestReadPeersOfRunningHoldersReadsNoLease shows real
// holders' objects explained the same way).
func TestReadPeersOfFiftyHoldersReadsNoLease(t *testing.T) {
	srv := s3test.NewFake(t)
	ctx := context.Background()
	ops := &opCounts{}
	repo := newS3Repo(t, srv, "", testPrefix, 5*time.Second, countingOps(ops))
	const n = 50
	if err := nodeid.Initialize(ctx, repo, n, "init", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	for id := range n {
		l := heldBy(fmt.Sprintf("task-%d", id), id, nodeid.Version(id%7+1), fmt.Sprintf("10.0.1.%d:26502", id))
		body, meta := l.Encode()
		putRaw(t, srv, nodeid.LeaseKey(testPrefix, id), string(body), meta)
		if err := repo.CreateTenure(ctx, nodeid.TenureObject{ID: id, Version: l.Instance.Version, LeaseDuration: l.Duration, Address: l.Address, TaskID: l.TaskID}); err != nil {
			t.Fatal(err)
		}
	}
	before := ops.snapshot()
	got, err := nodeid.ReadPeers(ctx, repo, n, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	after := ops.snapshot()
	if gets, lists := after["get"]-before["get"], after["list"]-before["list"]+after["list-tenures"]-before["list-tenures"]; gets != 1 || lists != 1 {
		t.Errorf("ReadPeers of %d holders: %d GETs, %d listings; want 1 (the marker) and 1", n, gets, lists)
	}
	want, err := readPeersByGet(ctx, repo, n, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("ReadPeers:\n%+v\nreading every lease:\n%+v", got, want)
	}
	for _, p := range got {
		if p.State != nodeid.PeerHeld || p.Address != fmt.Sprintf("10.0.1.%d:26502", p.ID) {
			t.Fatalf("peer %+v, want held with its address", p)
		}
	}
}

// Real holders' lease objects are explained by their tenure objects: a
// ReadPeers of a running cluster reads no lease.
func TestReadPeersOfRunningHoldersReadsNoLease(t *testing.T) {
	srv := s3test.NewFake(t)
	ctx := context.Background()
	const n = 3
	for i := range n {
		cfg := fastConfig(t, fmt.Sprintf("task-%d", i), n, nil)
		cfg.Address = fmt.Sprintf("10.0.2.%d:26502", i+1)
		acquire(t, newProvider(t, newRepo(t, srv, ""), cfg), 20*time.Second)
	}
	ops := &opCounts{}
	repo := newS3Repo(t, srv, "", testPrefix, 5*time.Second, countingOps(ops))
	waitFor(t, 10*time.Second, "every holder's tenure object", func() bool {
		ts, err := repo.ListTenures(ctx)
		return err == nil && len(ts) == n
	})
	before := ops.snapshot()
	got, err := nodeid.ReadPeers(ctx, repo, n, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	after := ops.snapshot()
	if gets := after["get"] - before["get"]; gets != 1 {
		t.Errorf("ReadPeers of %d running holders sent %d GETs, want 1 (the marker)", n, gets)
	}
	for _, p := range got {
		if p.State != nodeid.PeerHeld || p.Address == "" {
			t.Errorf("peer %+v, want held with its address", p)
		}
	}
}

// A holder's refresh reads a peer whose listed size tag is no longer its
// tenure object's (a take whose tenure object is not written yet) at the
// next refresh, not when the verification GET comes round to it, N
// refreshes later at worst.
func TestRefreshReadsATakeWithoutTenureObjectAtOnce(t *testing.T) {
	srv := s3test.NewFake(t)
	ctx := context.Background()
	const n = 21
	repo := newRepo(t, srv, "")
	if err := nodeid.Initialize(ctx, repo, n, "init", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	for id := 1; id < n; id++ {
		l := heldBy(fmt.Sprintf("task-%d", id), id, 1, fmt.Sprintf("10.0.3.%d:26502", id))
		body, meta := l.Encode()
		putRaw(t, srv, nodeid.LeaseKey(testPrefix, id), string(body), meta)
		if err := repo.CreateTenure(ctx, nodeid.TenureObject{ID: id, Version: 1, LeaseDuration: l.Duration, Address: l.Address, TaskID: l.TaskID}); err != nil {
			t.Fatal(err)
		}
	}
	ops := &opCounts{}
	cfg := fastConfig(t, "task-0", n, nil)
	cfg.MappingsRefreshInterval = 200 * time.Millisecond
	p := newProvider(t, newS3Repo(t, srv, "", testPrefix, 2*time.Second, countingOps(ops)), cfg)
	if inst := acquire(t, p, 20*time.Second); inst.ID != 0 {
		t.Fatalf("took %d, want 0, the only free ID", inst.ID)
	}
	waitFor(t, 10*time.Second, "a table of every peer", func() bool {
		peers := p.Peers()
		return len(peers) == n && peers[n-1].TaskID == "task-20" // held, or expired: nobody renews them
	})
	// The last peer is taken by another task at version 2; its tenure
	// object is not written (yet).
	taken := heldBy("task-20b", n-1, 2, "10.0.3.99:26502")
	body, meta := taken.Encode()
	putRaw(t, srv, nodeid.LeaseKey(testPrefix, n-1), string(body), meta)
	from := ops.get("list")
	waitFor(t, 10*time.Second, "the new holder in the table", func() bool {
		peers := p.Peers()
		return len(peers) == n && peers[n-1].TaskID == "task-20b" && peers[n-1].Version == 2
	})
	if refreshes := ops.get("list") - from; refreshes > 3 {
		t.Errorf("the new holder showed after %d refreshes, want at most 3 (the verification GET of %d peers comes round in up to %d)", refreshes, n-1, n-1)
	}
}
