package nodeid_test

// An object deleted from outside while its holder lives: the holder, the
// only task that may know its version, restores it, and no later task hands
// out a version again. From adversarial reviews; each test failed on the
// code it was written against.

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

// Schedule: N = 1 (or no peer has refreshed since the last takeover).
// Tenures v1 and v2 come and go, task "holder" takes v3. An operator
// deletes 0.json. The holder's next renewal gets 404 and it stops; only it
// knows v3, so it recreates the object as an expiring lease at v3 before it
// goes. (Before, the object was recreated at max(known, 1) = 1 and the
// spare took v2 again.)
func TestDeletedObjectIsRecreatedAtTheHoldersVersion(t *testing.T) {
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

// spareFirstRepo lets a spare's recreation land just before the holder's:
// the holder's first create of a "recreated-by:" lease is preceded by
// another task's create of the same object at version 1, as a spare that
// started when the holder stopped counting itself valid writes it.
type spareFirstRepo struct {
	nodeid.Repository
	once sync.Once
	err  error
}

func (r *spareFirstRepo) Create(ctx context.Context, l nodeid.Lease) (string, error) {
	if strings.HasPrefix(l.TaskID, "recreated-by:") {
		r.once.Do(func() {
			_, r.err = r.Repository.Create(ctx, nodeid.Lease{
				TaskID: "recreated-by:spare", Instance: nodeid.NodeInstance{ID: l.Instance.ID, Version: 1},
				Expires: time.Now().Add(l.Duration), Duration: l.Duration,
				Nonce: "5be11a5be11a5be11a5be11a5be11a00", Acquirable: true,
			})
		})
	}
	return r.Repository.Create(ctx, l)
}

// Schedule (seen in CI, the test above under load): the holder of v3 finds
// 0.json deleted and stops; a spare that starts at that moment recreates
// the object first, at version 1 (it knows no higher), and the holder's
// create gets 412. The holder used to give up there, and the spare took v2
// once its own recreation expired. The holder now reads the object and
// replaces a recreation below its version before its deadline, so the
// spare waits again and takes v4.
func TestHolderReplacesASparesLowerRecreation(t *testing.T) {
	srv := s3test.NewFake(t)
	direct := newRepo(t, srv, "")
	cycle(t, direct, "a", 1)
	cycle(t, direct, "b", 1)
	racing := &spareFirstRepo{Repository: direct}
	holder := newProvider(t, racing, fastConfig(t, "holder", 1, newLossRecorder()))
	held := acquire(t, holder, 5*time.Second)
	deleteRaw(t, srv, nodeid.LeaseKey(testPrefix, 0))
	waitFor(t, 3*time.Second, "the holder to notice the delete", func() bool { return !holder.Valid() })
	waitFor(t, 3*time.Second, "the holder to restore its version", func() bool {
		rec, err := direct.Get(context.Background(), 0)
		return err == nil && rec.Lease.Instance.Version == held.Version
	})
	if racing.err != nil {
		t.Fatalf("the spare's recreation did not land first: %v", racing.err)
	}
	rec, err := direct.Get(context.Background(), 0)
	if err != nil || rec.Lease.TaskID != "recreated-by:holder" {
		t.Fatalf("object after the holder's restore: %+v, %v", rec.Lease, err)
	}

	spare := newProvider(t, direct, fastConfig(t, "spare", 1, nil))
	inst := acquire(t, spare, 10*time.Second)
	if inst.Version <= held.Version {
		t.Fatalf("spare took %v after %v was handed out: the version went back", inst, held)
	}
}

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
