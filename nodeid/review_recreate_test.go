package nodeid_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// From the review of the protocol (REVP-4, fixed: release restores the version). The holder restores a deleted object at its own version only
// when a renewal (or its reconcile) finds it gone. If the object is
// deleted from outside after the last renewal and the holder is then
// closed (an ordinary shutdown: SIGTERM, a deployment), release() gets 404,
// logs "release failed; the lease will expire" and exits: nothing records
// v3 any more (one node ID). The next task recreates the object at v1 and
// takes v2, a version handed out before (to "b"), below v3: invariant 2.
func TestCloseAfterADeleteRestoresTheHoldersVersion(t *testing.T) {
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

// awsIfMatchRepo answers a conditional write (If-Match) on a missing key as
// AWS S3 and the simulation's world do: 404 NoSuchKey (gofakes3 says 412).
// Before the holder's first If-Match replacement of a recreation, the
// object is deleted from outside again (a cleanup script that runs
// twice); a spare's recreation at v1 lands before the holder's first
// create, as in TestHolderReplacesASparesLowerRecreation.
type awsIfMatchRepo struct {
	spareFirstRepo
	srv       *s3test.Server
	t         *testing.T
	deleted   sync.Once
	writes404 atomic.Int64
}

func (r *awsIfMatchRepo) Write(ctx context.Context, l nodeid.Lease, etag string) (string, error) {
	if strings.HasPrefix(l.TaskID, "recreated-by:") {
		r.deleted.Do(func() { deleteRaw(r.t, r.srv, nodeid.LeaseKey(testPrefix, l.Instance.ID)) })
	}
	got, err := r.spareFirstRepo.Write(ctx, l, etag)
	if errors.Is(err, nodeid.ErrPreconditionFailed) {
		if _, gerr := r.spareFirstRepo.Get(ctx, l.Instance.ID); errors.Is(gerr, nodeid.ErrNotFound) {
			r.writes404.Add(1)
			return "", &nodeid.StorageError{Op: "write", Key: nodeid.LeaseKey(testPrefix, l.Instance.ID), Kind: nodeid.ErrNotFound, Status: 404, Code: "NoSuchKey"}
		}
	}
	return got, err
}

// From the review of the protocol (REVP-5, fixed: a 404 to the If-Match creates again). recreateDeleted treats a 404 only from its GET as "create
// again"; a 404 answer to its If-Match replacement (AWS's answer when the
// key is gone) falls through to "wait and retry" with the same ETag, so it
// repeats an If-Match on a missing key until its deadline and never
// recreates the object. Schedule: holder v3 (after a v1, b v2); 0.json
// deleted; a spare's recreation at v1 lands first; the holder's create
// gets 412, its GET shows v1, and the object is deleted again before the
// holder's If-Match. The holder stops without restoring v3; the next task
// recreates at v1 and takes v2: a repeated, lower version.
func TestRecreationCreatesAgainAfterA404ToItsIfMatch(t *testing.T) {
	srv := s3test.NewFake(t)
	direct := newRepo(t, srv, "")
	cycle(t, direct, "a", 1)
	cycle(t, direct, "b", 1)
	repo := &awsIfMatchRepo{spareFirstRepo: spareFirstRepo{Repository: direct}, srv: srv, t: t}
	holder := newProvider(t, repo, fastConfig(t, "holder", 1, newLossRecorder()))
	held := acquire(t, holder, 5*time.Second)
	deleteRaw(t, srv, nodeid.LeaseKey(testPrefix, 0))
	waitFor(t, 3*time.Second, "the holder to notice the delete", func() bool { return !holder.Valid() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = holder.Close(ctx) // waits for recreateDeleted to end (at the deadline)
	cancel()
	if repo.spareFirstRepo.err != nil {
		t.Fatalf("the spare's recreation did not land first: %v", repo.spareFirstRepo.err)
	}
	t.Logf("If-Match writes answered 404: %d", repo.writes404.Load())
	rec, err := direct.Get(context.Background(), 0)
	t.Logf("object after the holder stopped: %+v, %v", rec.Lease, err)

	spare := newProvider(t, direct, fastConfig(t, "spare", 1, nil))
	inst := acquire(t, spare, 10*time.Second)
	if inst.Version <= held.Version {
		t.Fatalf("spare took %v after %v was handed out: the holder never recreated its object after a 404 to its If-Match", inst, held)
	}
}
