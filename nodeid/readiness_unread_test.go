package nodeid_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// Issue 23.7: a peer whose lease cannot be read is not a peer that knows our
// version. Here the newcomer's GETs of the live peer's lease answer 503 from
// the moment it holds its lease (the take itself needs them): it must stay
// not ready while they do, long before its readiness timeout, and turn ready
// once the peer is read and knows.
func TestReadinessWaitsWhileAPeerCannotBeRead(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		repo := newRepo(t, srv, "")
		peerCfg := doubled(fastConfig(t, "peer", 2, nil))
		peerCfg.AllowedIDs = []int{0}
		peerCfg.MappingsRefreshInterval = 300 * time.Millisecond
		acquire(t, newProvider(t, repo, peerCfg), 5*time.Second)
		writeDeadLease(t, repo, 1, 3)

		var newcomer atomic.Pointer[nodeid.Provider]
		var healed atomic.Bool
		peerKey := nodeid.LeaseKey(testPrefix, 0)
		failPeerGet, failed := failWhileHolding("failPeerGet", &newcomer, func(params any) bool {
			g, ok := params.(*s3.GetObjectInput)
			return ok && strings.HasSuffix(aws.ToString(g.Key), peerKey) && !healed.Load()
		})
		nrepo := newS3Repo(t, srv, "", testPrefix, 2*time.Second, failPeerGet)
		cfg := doubled(fastConfig(t, "newcomer", 2, nil))
		cfg.AllowedIDs = []int{1}
		cfg.ReadinessTimeout = time.Minute
		p := newProvider(t, nrepo, cfg)
		newcomer.Store(p)
		inst := acquire(t, p, 10*time.Second)
		if inst.Version != 4 || p.PreviousGracefullyShutdown() {
			t.Fatalf("got %v graceful=%v, want an ungraceful takeover to v4", inst, p.PreviousGracefullyShutdown())
		}
		// Several refresh rounds find the peer unreadable; the peer itself
		// learns v4 meanwhile, but the newcomer cannot see that.
		waitFor(t, 15*time.Second, "three failed reads of the peer's lease", func() bool { return failed.Load() >= 3 || p.Ready() })
		if p.Ready() {
			t.Fatalf("ready after %d failed reads of the live peer's lease, long before the %v readiness timeout", failed.Load(), cfg.ReadinessTimeout)
		}
		healed.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := p.WaitReady(ctx); err != nil {
			t.Fatalf("not ready once the peer could be read: %v", err)
		}
		rec, err := repo.Get(context.Background(), 0)
		if err != nil || rec.Lease.KnownVersions[1] != 4 {
			t.Fatalf("ready although the peer's lease knows node 1 as v%d (%v)", rec.Lease.KnownVersions[1], err)
		}
	})
}
