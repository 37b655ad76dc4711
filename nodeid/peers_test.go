package nodeid_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/camunda"
	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

func TestValidateAddress(t *testing.T) {
	good := []string{"10.0.1.7", "10.0.1.7:9093", "broker-0.kafka.internal", "broker-0.kafka.internal:9093",
		"[fd00::1]:9093", "fd00::1", "localhost", "a.b.c."}
	for _, a := range good {
		if err := nodeid.ValidateAddress(a); err != nil {
			t.Errorf("%q: %v", a, err)
		}
	}
	bad := []string{"", "10.0.1.7:", "10.0.1.7:0", "10.0.1.7:65536", "10.0.1.7:09093", "host:port", "-host", "host-",
		"ho st", "0.0.0.0", "[::]:9093", "fd00::1:9093x", "a..b", "http://x", "x/y", "[fd00::1]", "under_score.example"}
	for _, a := range bad {
		if err := nodeid.ValidateAddress(a); !errors.Is(err, nodeid.ErrInvalidAddress) {
			t.Errorf("%q accepted (%v)", a, err)
		}
	}
}

// The address travels in user metadata of held leases only; Camunda reads
// such a lease as before.
func TestAddressIsMetadataOfHeldLeasesOnly(t *testing.T) {
	held := nodeid.Lease{TaskID: "t", Instance: nodeid.NodeInstance{ID: 1, Version: 2}, Expires: time.UnixMilli(1), Nonce: "ab", Acquirable: true, Address: "10.0.0.5:9093"}
	body, meta := held.Encode()
	if meta["address"] != "10.0.0.5:9093" {
		t.Fatalf("metadata %v", meta)
	}
	if back, err := nodeid.DecodeLease(1, body, meta); err != nil || back.Address != held.Address {
		t.Fatalf("read back %+v, %v", back, err)
	}
	if s, err := camunda.ReadLease(body, meta); err != nil || !s.Initialized || s.TaskID != "t" {
		t.Fatalf("Camunda reads %v, %v", s, err)
	}
	rel := held
	rel.TaskID, rel.Writer = "", "t"
	if _, meta := rel.Encode(); meta["address"] != "" {
		t.Fatalf("a released lease publishes an address: %v", meta)
	}
}

func TestBadAddressIsAConfigError(t *testing.T) {
	cfg := fastConfig(t, "t", 1, nil)
	cfg.Address = "10.0.0.1:99999"
	if _, err := nodeid.NewProvider(rootRepo(t, s3test.NewFake(t)), cfg); !errors.Is(err, nodeid.ErrInvalidConfig) {
		t.Fatalf("NewProvider: %v", err)
	}
}

// Three holders publish addresses; each one's Peers table converges to all
// three; after one holder dies, a spare with another address takes its ID
// and the survivors' tables show the new address, the dead one never
// again once the spare holds it.
func TestPeersFollowAFailover(t *testing.T) {
	srv := s3test.NewFake(t)
	ctx := context.Background()
	start := func(task, addr string, lost *lossRecorder) *nodeid.Provider {
		cfg := fastConfig(t, task, 3, lost)
		cfg.Address = addr
		cfg.MappingsRefreshInterval = 500 * time.Millisecond
		p := newProvider(t, rootRepo(t, srv), cfg)
		return p
	}
	addrs := map[string]string{"a": "10.0.0.1:9093", "b": "10.0.0.2:9093", "c": "10.0.0.3:9093"}
	ps := map[string]*nodeid.Provider{}
	byID := map[int]string{}
	for _, task := range []string{"a", "b", "c"} {
		ps[task] = start(task, addrs[task], newLossRecorder())
		inst := acquire(t, ps[task], 20*time.Second)
		byID[inst.ID] = task
	}
	full := func(p *nodeid.Provider, want map[int]string) bool {
		peers := p.Peers()
		if len(peers) != 3 {
			return false
		}
		for _, peer := range peers {
			if peer.State != nodeid.PeerHeld || peer.Address != want[peer.ID] {
				return false
			}
		}
		return true
	}
	want := map[int]string{}
	for id, task := range byID {
		want[id] = addrs[task]
	}
	for task, p := range ps {
		waitFor(t, 10*time.Second, task+"'s table to show all three", func() bool { return full(p, want) })
	}
	read, err := nodeid.ReadPeers(ctx, rootRepo(t, srv), 3, 2*time.Second)
	if err != nil || len(read) != 3 {
		t.Fatalf("ReadPeers: %v, %v", read, err)
	}
	for _, peer := range read {
		if peer.Address != want[peer.ID] || peer.State != nodeid.PeerHeld {
			t.Fatalf("ReadPeers: %+v", read)
		}
	}

	// The holder of node 0 stops renewing (Close without release is not
	// available; kill it by handing off, which stops without releasing).
	victim := byID[0]
	if _, err := ps[victim].HandOff(ctx); err != nil {
		t.Fatal(err)
	}
	spare := start("spare", "10.0.0.9:9093", newLossRecorder())
	inst := acquire(t, spare, 20*time.Second)
	if inst.ID != 0 {
		t.Fatalf("spare took %v", inst)
	}
	want[0] = "10.0.0.9:9093"
	for task, p := range ps {
		if task == victim {
			continue
		}
		waitFor(t, 10*time.Second, task+"'s table to show the spare", func() bool { return full(p, want) })
	}
}
