package nodeid_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// opCounts counts one client's S3 requests by kind: lease GETs, lease
// listings, tenure listings, PUTs and DELETEs.
type opCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *opCounts) get(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[kind]
}

func (c *opCounts) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

func countingOps(c *opCounts) func(*s3.Options) {
	return beforeEveryRequest("count", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
		kind := ""
		switch p := in.Parameters.(type) {
		case *s3.GetObjectInput:
			kind = "get"
		case *s3.ListObjectsV2Input:
			kind = "list"
			if strings.HasSuffix(aws.ToString(p.Prefix), nodeid.TenureKeyPrefix) {
				kind = "list-tenures"
			}
		case *s3.PutObjectInput:
			kind = "put"
		case *s3.DeleteObjectInput:
			kind = "delete"
		case *s3.HeadObjectInput:
			kind = "head"
		}
		c.mu.Lock()
		if c.n == nil {
			c.n = map[string]int{}
		}
		c.n[kind]++
		c.mu.Unlock()
		return next.HandleInitialize(ctx, in)
	})
}

func TestTenureKeyRoundTrip(t *testing.T) {
	in := nodeid.TenureObject{ID: 7, Version: 42, LeaseDuration: 15 * time.Second, Address: "10.0.0.7:26502", TaskID: "arn:aws:ecs:eu-west-1:1:task/c/abc"}
	key, ok := nodeid.TenureKey("cluster-a/", in)
	if !ok || key != "cluster-a/nodeid-tenures/7/42/15000/10.0.0.7:26502/arn:aws:ecs:eu-west-1:1:task/c/abc" {
		t.Fatalf("TenureKey = %q, %v", key, ok)
	}
	got, ok := nodeid.ParseTenureKey("cluster-a/", key)
	if !ok || got != in {
		t.Fatalf("ParseTenureKey = %+v, %v; want %+v", got, ok, in)
	}
	noAddr := in
	noAddr.Address = ""
	key, _ = nodeid.TenureKey("", noAddr)
	if got, ok := nodeid.ParseTenureKey("", key); !ok || got != noAddr {
		t.Fatalf("without address: %q -> %+v, %v", key, got, ok)
	}
	for _, bad := range []string{
		"nodeid-tenures/7/42/15000/_", "nodeid-tenures/x/42/15000/_/t", "nodeid-tenures/7/0/15000/_/t",
		"nodeid-tenures/07/42/15000/_/t", "nodeid-tenures/7/42/0/_/t", "nodeid-tenures/7/42/15000/not an address/t",
		"nodeid-tenures/7/42/15000/_/$(reboot)", "7.json", "other/nodeid-tenures/7/42/15000/_/t",
	} {
		if got, ok := nodeid.ParseTenureKey("", bad); ok {
			t.Errorf("ParseTenureKey(%q) = %+v, want refused", bad, got)
		}
	}
	if _, ok := nodeid.TenureKey("", nodeid.TenureObject{ID: 1, Version: 1, LeaseDuration: time.Second, TaskID: "bad task"}); ok {
		t.Error("TenureKey named a task ID we never write")
	}
}

// The lease listing shows the tenure objects beside the leases, and none is
// taken for a lease.
func TestLeaseListingShowsTenureObjectsApart(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		ctx := context.Background()
		ops := &opCounts{}
		repo := newS3Repo(t, srv, "", testPrefix, 5*time.Second, countingOps(ops))
		if err := nodeid.Initialize(ctx, repo, 3, "init", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		for i := range 1100 {
			if err := repo.CreateTenure(ctx, nodeid.TenureObject{ID: i % 3, Version: nodeid.Version(i + 1), LeaseDuration: 2 * time.Second, TaskID: fmt.Sprintf("task-%d", i)}); err != nil {
				t.Fatal(err)
			}
		}
		before := ops.get("list")
		listing, err := repo.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if pages := ops.get("list") - before; pages != 2 {
			t.Errorf("listing of 1,104 keys took %d pages, want 2", pages)
		}
		if len(listing.Slots) != 3 || !listing.MarkerSeen || !listing.TenuresListed || len(listing.Tenures) != 1100 {
			t.Errorf("listing: %d slots, marker %v, %d tenures; want 3, the marker and 1100", len(listing.Slots), listing.MarkerSeen, len(listing.Tenures))
		}
		tenures, err := repo.ListTenures(ctx)
		if err != nil || len(tenures) != 1100 {
			t.Fatalf("ListTenures: %d, %v; want 1100", len(tenures), err)
		}
	})
}

// In steady state a holder reads (GETs) at most one peer per refresh,
// however many peers it has, and its table still shows every live peer with
// its address. Before issue 25 it read every peer at every refresh.
func TestSteadyStateRefreshReadsAtMostOnePeerPerRefresh(t *testing.T) {
	srv := s3test.NewFake(t)
	const n = 6
	counts := make([]*opCounts, n)
	ps := make([]*nodeid.Provider, n)
	addr := func(i int) string { return fmt.Sprintf("10.0.0.%d:26502", i+1) }
	for i := range n {
		counts[i] = &opCounts{}
		cfg := fastConfig(t, fmt.Sprintf("task-%d", i), n, nil)
		cfg.Address = addr(i)
		cfg.MappingsRefreshInterval = 200 * time.Millisecond
		ps[i] = newProvider(t, newS3Repo(t, srv, "", testPrefix, 2*time.Second, countingOps(counts[i])), cfg)
	}
	addrOf := map[int]string{}
	for i, p := range ps {
		inst := acquire(t, p, 20*time.Second)
		addrOf[inst.ID] = addr(i)
	}
	full := func(p *nodeid.Provider) bool {
		peers := p.Peers()
		if len(peers) != n {
			return false
		}
		for _, peer := range peers {
			if peer.State != nodeid.PeerHeld || peer.Address != addrOf[peer.ID] {
				return false
			}
		}
		return true
	}
	for i, p := range ps {
		waitFor(t, 10*time.Second, fmt.Sprintf("task-%d's table", i), func() bool { return full(p) })
	}
	before := make([]map[string]int, n)
	for i := range n {
		before[i] = counts[i].snapshot()
	}
	time.Sleep(2 * time.Second) // about ten refreshes
	for i := range n {
		after := counts[i].snapshot()
		refreshes := after["list"] - before[i]["list"]
		gets := after["get"] - before[i]["get"]
		tenureLists := after["list-tenures"] - before[i]["list-tenures"] + refreshes
		if refreshes < 5 {
			t.Fatalf("task-%d: %d refreshes in 2 s, want about 10", i, refreshes)
		}
		if tenureLists != refreshes {
			t.Errorf("task-%d: %d separate tenure listings: they come with the lease listing", i, tenureLists-refreshes)
		}
		if gets > refreshes+1 {
			t.Errorf("task-%d: %d GETs in %d refreshes of %d peers: want at most one per refresh", i, gets, refreshes, n-1)
		}
		if !full(ps[i]) {
			t.Errorf("task-%d's table lost a peer: %+v", i, ps[i].Peers())
		}
	}
}

// A holder deletes the tenure objects of its own node ID below its version,
// and nothing else: not its own ID's at or above its version, not another
// ID's.
func TestHolderDeletesOnlyItsOwnOlderTenureObjects(t *testing.T) {
	srv := s3test.NewFake(t)
	ctx := context.Background()
	repo := newRepo(t, srv, "")
	if err := nodeid.Initialize(ctx, repo, 2, "init", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	first := newProvider(t, newRepo(t, srv, ""), fastConfig(t, "first", 2, nil))
	inst := acquire(t, first, 20*time.Second)
	waitFor(t, 5*time.Second, "the first tenure object", func() bool {
		ts, _ := repo.ListTenures(ctx)
		return len(ts) == 1
	})
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	other := 1 - inst.ID
	planted := []nodeid.TenureObject{
		{ID: inst.ID, Version: inst.Version + 1, LeaseDuration: time.Second, TaskID: "same-version-other-task"},
		{ID: inst.ID, Version: inst.Version, LeaseDuration: time.Second, TaskID: "older-other-task"},
		{ID: inst.ID, Version: 9, LeaseDuration: time.Second, TaskID: "higher"},
		{ID: other, Version: 1, LeaseDuration: time.Second, TaskID: "other-id"},
	}
	for _, pt := range planted {
		if err := repo.CreateTenure(ctx, pt); err != nil {
			t.Fatal(err)
		}
	}
	cfg := fastConfig(t, "second", 2, nil)
	cfg.AllowedIDs = []int{inst.ID}
	cfg.MappingsRefreshInterval = 200 * time.Millisecond
	second := newProvider(t, newRepo(t, srv, ""), cfg)
	got := acquire(t, second, 20*time.Second)
	if got.ID != inst.ID || got.Version != inst.Version+1 {
		t.Fatalf("second took %v after %v", got, inst)
	}
	keep := map[string]bool{"same-version-other-task": true, "higher": true, "other-id": true, "second": true}
	waitFor(t, 5*time.Second, "the first tenure's object to be collected", func() bool {
		ts, err := repo.ListTenures(ctx)
		if err != nil {
			return false
		}
		names := map[string]bool{}
		for _, tn := range ts {
			names[tn.TaskID] = true
		}
		return !names["first"] && !names["older-other-task"] && len(names) == len(keep)
	})
	time.Sleep(time.Second) // more refreshes: still nothing else deleted
	ts, err := repo.ListTenures(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tn := range ts {
		delete(keep, tn.TaskID)
	}
	if len(keep) != 0 {
		t.Errorf("tenure objects deleted that were not the holder's garbage: %v (left %+v)", keep, ts)
	}
}
