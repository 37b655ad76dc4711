package nodeid_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// Found by a review: readiness "fails open after the timeout" (docs/operations.md), but
// the fail-open is decided only after a successful LIST: with the listing
// answering 503 from the moment the lease is held, /readyz stays 503 forever,
// long past ReadinessTimeout.
func TestReadinessFailsOpenWhileTheListingFails(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		repo := newRepo(t, srv, "")
		peerCfg := doubled(fastConfig(t, "peer", 2, nil))
		peerCfg.AllowedIDs = []int{0}
		acquire(t, newProvider(t, repo, peerCfg), 5*time.Second)
		writeDeadLease(t, repo, 1, 3)

		var newcomer atomic.Pointer[nodeid.Provider]
		failList, _ := failWhileHolding("failList", &newcomer, func(params any) bool {
			_, ok := params.(*s3.ListObjectsV2Input)
			return ok
		})
		nrepo := newS3Repo(t, srv, "", testPrefix, 2*time.Second, failList)
		cfg := doubled(fastConfig(t, "newcomer", 2, nil))
		cfg.AllowedIDs = []int{1}
		cfg.ReadinessTimeout = 2 * time.Second
		p := newProvider(t, nrepo, cfg)
		newcomer.Store(p)
		inst := acquire(t, p, 10*time.Second)
		if p.PreviousGracefullyShutdown() {
			t.Fatalf("got %v graceful, want an ungraceful takeover", inst)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*cfg.ReadinessTimeout)
		defer cancel()
		if err := p.WaitReady(ctx); err != nil {
			t.Fatalf("not ready %v after acquisition although ReadinessTimeout is %v (fails open, per docs) and the lease is valid=%t: %v", 5*cfg.ReadinessTimeout, cfg.ReadinessTimeout, p.Valid(), err)
		}
	})
}
