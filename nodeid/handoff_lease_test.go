package nodeid_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// From the second review. Schedule (invariants 1 and 4): the hand-off
// carried no lease duration, and the adopter credited a landed write of its
// predecessor with its OWN validity. The hand-off now carries the duration
// and an adopter with another one is refused (a configuration error).
//
//	`acquire` runs with L = 4 s (m = 0.8 s), `renew` with L = 12 s
//	(m = 2.4 s): NODEID_LEASE_DURATION set on one container only, or an
//	embedded provider adopting with its own Config.
//	t=0     acquire takes node 0; its body says leaseDurationMs = 4000.
//	t=1     its renewal W (nonce n, leaseDurationMs = 4000) lands; the
//	        answer is lost. HandOff: ETag of t=0, pending {n, sent t=1},
//	        deadline t=3.2.
//	t~2     renew adopts: If-Match ETag(t=0) -> 412 -> GET shows nonce n,
//	        ours -> renewed(sent = 1): deadline = 1 + 12 - 2.4 = t=10.6,
//	        though W told every candidate "4 s".
//	t~2+    renew cannot reach S3 (partition): no later write.
//	t~5..6  a spare with L = 4 s judges W expired (Date - LM >= 5 s, or 4 s
//	        unchanged) and takes node 0 v2.
//
// Both are valid until t = 10.6.
func TestAdopterWithAnotherLeaseDurationIsRefused(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		proxy := startProxy(t, srv)
		acqCfg := review2Timing(fastConfig(t, "task-1", 1, newLossRecorder()), 4*time.Second, time.Second, 800*time.Millisecond, 800*time.Millisecond)
		first := newProvider(t, newRepo(t, srv, proxy.URL), acqCfg)
		acquire(t, first, 5*time.Second)
		h := handOffAfterALostRenewal(t, first, proxy)

		proxy2 := startProxy(t, srv)
		adCfg := review2Timing(fastConfig(t, "task-1", 1, newLossRecorder()), 12*time.Second, 4*time.Second, 2400*time.Millisecond, 2*time.Second)
		adopter := newProvider(t, newRepo(t, srv, proxy2.URL), adCfg)
		if _, err := adopter.Adopt(context.Background(), h); !errors.Is(err, nodeid.ErrInvalidConfig) {
			t.Fatalf("adopting a hand-off of a 4s lease with a 12s one: %v, want ErrInvalidConfig", err)
		}
	})
}
