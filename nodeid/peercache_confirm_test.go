package nodeid_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// camundaHeld is a held lease as Camunda's broker writes it (no nonce, no
// duration), with an expiry timestamp an hour away and mappings known.
func camundaHeld(task string, id int, version int64, known string) (string, map[string]string) {
	body := fmt.Sprintf(`{"taskId":%q,"timestamp":%d,"nodeInstance":{"id":%d,"version":%d},"knownVersionMappings":{"mappingsByNodeId":{%s}}}`,
		task, time.Now().Add(time.Hour).UnixMilli(), id, version, known)
	return body, map[string]string{"taskid": task, "version": fmt.Sprint(version), "acquirable": "true"}
}

// A confirmation of our version belongs to the holder and the object it was
// read from. Node 0's nodeid holder lists our version; a Camunda broker
// overwrites that lease with its own take right after our read of it, before
// any refresh could see the lease expired (no tenure object, the same
// holder in our cache). Nothing but the listed size says the holder
// changed: the holder must read node 0 again before it turns ready, not
// wait for the round robin to come round to it.
func TestReadinessConfirmationEndsWithTheHolderThatGaveIt(t *testing.T) {
	srv := s3test.NewFake(t)
	const n = 6
	camundaBucket(t, srv, n)
	// Nodes 0..3: nodeid holders for an hour; node 4: a Camunda broker;
	// node 5: a crashed broker.
	nodeidPeers := func(known nodeid.VersionMappings) {
		for id := range 4 {
			l := nodeid.Lease{TaskID: fmt.Sprintf("peer-%d", id), Instance: nodeid.NodeInstance{ID: id, Version: 1},
				Expires: time.Now().Add(time.Hour), Duration: time.Hour, Nonce: fmt.Sprintf("nonce-%d-%d", id, len(known)), Acquirable: true,
				KnownVersions: known}
			body, meta := l.Encode()
			putRaw(t, srv, nodeid.LeaseKey("", id), string(body), meta)
		}
	}
	nodeidPeers(nodeid.VersionMappings{})
	body, meta := camundaHeld("camunda-c", 4, 1, "")
	putRaw(t, srv, nodeid.LeaseKey("", 4), body, meta)
	body, meta = foreignLease("camunda-x", 5, 1)
	putRaw(t, srv, nodeid.LeaseKey("", 5), body, meta)

	read0 := make(chan struct{}, 100)
	seeRead0 := beforeEveryRequest("seeRead0", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
		out, md, err := next.HandleInitialize(ctx, in)
		if g, ok := in.Parameters.(*s3.GetObjectInput); ok && aws.ToString(g.Key) == nodeid.LeaseKey("", 0) {
			select {
			case read0 <- struct{}{}:
			default:
			}
		}
		return out, md, err
	})
	cfg := fastConfig(t, "nodeid-new", n, nil)
	cfg.AllowedIDs = []int{5}
	cfg.ReadinessTimeout = time.Minute
	p := newProvider(t, newS3Repo(t, srv, "", "", 2*time.Second, seeRead0), cfg)
	inst := acquire(t, p, 15*time.Second)
	if inst.ID != 5 || p.PreviousGracefullyShutdown() {
		t.Fatalf("took %v graceful=%v, want an ungraceful takeover of node 5", inst, p.PreviousGracefullyShutdown())
	}
	nodeidPeers(nodeid.VersionMappings{5: inst.Version}) // they learn our version
	time.Sleep(time.Second)                              // every peer read; nodes 0..3 confirmed
	if p.Ready() {
		t.Fatal("ready although camunda-c does not know our version")
	}

	// Right after a read of node 0: camunda-b takes it, camunda-c learns us.
	for len(read0) > 0 {
		<-read0
	}
	<-read0
	body, meta = camundaHeld("camunda-b", 0, 2, "")
	putRaw(t, srv, nodeid.LeaseKey("", 0), body, meta)
	body, meta = camundaHeld("camunda-c", 4, 1, fmt.Sprintf(`"5":%d`, inst.Version))
	putRaw(t, srv, nodeid.LeaseKey("", 4), body, meta)

	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if p.Ready() {
			t.Fatalf("ready while node 0's live holder camunda-b does not list node 5 v%d", inst.Version)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := p.KnownVersions()[0]; got != 2 {
		t.Errorf("known version of node 0 = %d, want camunda-b's 2", got)
	}
}

// A tenure object first seen after its holder released (its take, tenure and
// release all between two refreshes) is shown released at its version, with
// no address, as the listed size says: not held with the gone task's
// address until the lease would have expired.
func TestTenureFirstSeenAfterItsReleaseIsShownReleased(t *testing.T) {
	srv := s3test.NewFake(t)
	const n = 6
	ctx := context.Background()
	if err := nodeid.Initialize(ctx, rootRepo(t, srv), n, "init", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	tenure := func(id int, v nodeid.Version, d time.Duration) {
		key, ok := nodeid.TenureKey("", nodeid.TenureObject{ID: id, Version: v, LeaseDuration: d,
			Address: fmt.Sprintf("10.0.0.%d:26502", id+1), TaskID: fmt.Sprintf("peer-%d", id)})
		if !ok {
			t.Fatal("tenure key")
		}
		putRaw(t, srv, key, "{}", nil)
	}
	// Nodes 1..4: live nodeid holders known only from their tenure objects,
	// so the verification GET reads them first (listing order).
	for id := 1; id <= 4; id++ {
		l := nodeid.Lease{TaskID: fmt.Sprintf("peer-%d", id), Instance: nodeid.NodeInstance{ID: id, Version: 1},
			Expires: time.Now().Add(time.Hour), Duration: time.Hour, Nonce: fmt.Sprintf("nonce-%d", id), Acquirable: true,
			Address: fmt.Sprintf("10.0.0.%d:26502", id+1)}
		body, meta := l.Encode()
		putRaw(t, srv, nodeid.LeaseKey("", id), string(body), meta)
		tenure(id, 1, time.Hour)
	}
	// Node 5: peer-5 took v1, wrote its tenure object and released.
	tenure(5, 1, time.Hour)
	rel := nodeid.Lease{Writer: "peer-5", Instance: nodeid.NodeInstance{ID: 5, Version: 1}, Nonce: "released-5", Acquirable: true}
	body, meta := rel.Encode()
	putRaw(t, srv, nodeid.LeaseKey("", 5), string(body), meta)

	ops := &opCounts{}
	cfg := fastConfig(t, "nodeid-h", n, nil)
	cfg.AllowedIDs = []int{0}
	cfg.MappingsRefreshInterval = 300 * time.Millisecond
	h := newProvider(t, newS3Repo(t, srv, "", "", 2*time.Second, countingOps(ops)), cfg)
	acquire(t, h, 10*time.Second)
	waitFor(t, 5*time.Second, "ready", h.Ready)
	lists := ops.get("list")
	waitFor(t, 5*time.Second, "a refresh", func() bool { return ops.get("list") > lists })
	for range 3 { // the first refreshes: node 5 not read yet
		time.Sleep(cfg.MappingsRefreshInterval)
		for _, peer := range h.Peers() {
			if peer.ID == 5 && (peer.State != nodeid.PeerReleased || peer.Address != "") {
				t.Fatalf("node 5 shown %s at %q, v%d; want released with no address", peer.State, peer.Address, peer.Version)
			}
		}
	}
}
