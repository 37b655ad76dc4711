package nodeid_test

import (
	"context"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// REVP-4. The holder restores a deleted object at its own version only
// when a renewal (or its reconcile) finds it gone. If the object is
// deleted from outside after the last renewal and the holder is then
// closed (an ordinary shutdown: SIGTERM, a deployment), release() gets 404,
// logs "release failed; the lease will expire" and exits: nothing records
// v3 any more (one node ID). The next task recreates the object at v1 and
// takes v2, a version handed out before (to "b"), below v3: invariant 2.
func TestRevpDeleteThenCloseLosesTheHoldersVersion(t *testing.T) {
	srv := s3test.NewFake(t)
	direct := newRepo(t, srv, "")
	cycle(t, direct, "a", 1)
	cycle(t, direct, "b", 1)
	cfg := fastConfig(t, "holder", 1, newLossRecorder())
	cfg.RenewInterval = 800 * time.Millisecond // the delete lands between two renewals
	holder := newProvider(t, direct, cfg)
	held := acquire(t, holder, 5*time.Second)
	deleteRaw(t, srv, nodeid.LeaseKey(testPrefix, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := holder.Close(ctx)
	cancel()
	t.Logf("holder %v closed: %v", held, err)

	scfg := fastConfig(t, "spare", 1, nil)
	spare := newProvider(t, direct, scfg)
	inst := acquire(t, spare, 15*time.Second)
	if inst.Version <= held.Version {
		t.Fatalf("spare took %v after %v was handed out and closed: the version went back (repeats b's)", inst, held)
	}
}
