package nodeid_test

// Adversarial review: what operators and other people can do to the
// objects. These schedules break the invariants through paths that
// docs/design.md or the API comments mention; the tests pin down exactly
// what breaks.

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// Schedule: `release --force` while the holder is alive (the fault model:
// "release --force at any moment"). ForceRelease writes a released body;
// the successor takes it at once with previous_graceful=true (so it
// hard-links the whole data directory) while the holder is still valid
// until its next renewal gets 412: invariants 1 and 3. ForceRelease's
// comment says "only use this when the holder is known to be dead"; the
// released body carries nothing that tells the successor it was forced.
func TestReviewForceReleaseOfALiveHolderGivesAGracefulTakeover(t *testing.T) {
	srv := s3test.NewFake(t)
	direct := newRepo(t, srv, "")
	holder := newProvider(t, direct, fastConfig(t, "holder", 1, newLossRecorder()))
	acquire(t, holder, 5*time.Second)

	if _, err := nodeid.ForceRelease(context.Background(), direct, 0, 0, "operator"); err != nil {
		t.Fatal(err)
	}
	succ := newProvider(t, direct, fastConfig(t, "successor", 1, nil))
	inst := acquire(t, succ, 5*time.Second)
	if holder.Valid() && succ.Valid() {
		t.Fatalf("two valid holders of node 0 after release --force: holder %v and successor %v (previous_graceful=%v)",
			holder.Instance(), inst, succ.PreviousGracefullyShutdown())
	}
}

// Schedule: N = 1 (or no peer has refreshed since the last takeover).
// Tenures v1 and v2 come and go, task "holder" takes v3. An operator
// deletes 0.json. The holder's next renewal gets 404 and it stops (safe),
// but nothing knows v3 any more: the object is recreated at
// max(known, 1) = 1 and the spare takes v2 after L + 1 s. The version went
// from 3 back to 2 and v2 is handed out twice (invariant 2). design.md's
// schedule 5 lists "an outside delete before peers learned the version"
// among the ways versions go back, and leaves it to the data root to refuse.
func TestReviewDeletedObjectIsRecreatedBelowTheHoldersVersion(t *testing.T) {
	srv := s3test.NewFake(t)
	direct := newRepo(t, srv, "")
	cycle(t, direct, "a", 1)
	cycle(t, direct, "b", 1)
	holder := newProvider(t, direct, fastConfig(t, "holder", 1, newLossRecorder()))
	held := acquire(t, holder, 5*time.Second)
	deleteRaw(t, srv, nodeid.LeaseKey(testPrefix, 0))
	waitFor(t, 3*time.Second, "the holder to notice the delete", func() bool { return !holder.Valid() })

	spare := newProvider(t, direct, fastConfig(t, "spare", 1, nil))
	inst := acquire(t, spare, 10*time.Second)
	if inst.Version <= held.Version {
		t.Fatalf("spare took %v after %v was handed out: the version went back", inst, held)
	}
}

// Schedule: someone writes a lease whose knownVersionMappings name an
// absurd version (MaxInt64) for node 0. Parsing accepts any non-negative
// int64, and the next taker computes 1 + MaxInt64, which wraps to a
// negative version; it holds node 0 at version -9223372036854775808 and
// writes it to S3 (invariant 2; every later read of the object then fails
// as corrupt: "negative nodeInstance.version").
func TestReviewHugeKnownVersionWrapsTheNextVersion(t *testing.T) {
	srv := s3test.NewFake(t)
	direct := newRepo(t, srv, "")
	if err := nodeid.Initialize(context.Background(), direct, 1, "bootstrap", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`{"taskId":"someone","timestamp":%d,"nodeInstance":{"id":0,"version":5},"knownVersionMappings":{"mappingsByNodeId":{"0":%d}},"nonce":"x"}`,
		time.Now().UnixMilli(), int64(math.MaxInt64))
	for len(body)%512 != 0 {
		body += " "
	}
	putRaw(t, srv, nodeid.LeaseKey(testPrefix, 0), body, map[string]string{"taskid": "", "version": "5", "acquirable": "true"})

	p := newProvider(t, direct, fastConfig(t, "task", 1, nil))
	inst := acquire(t, p, 5*time.Second)
	if inst.Version <= 5 {
		t.Fatalf("took %v after a released v5: the version wrapped around", inst)
	}
}
