package nodeid_test

// From an adversarial review: what operators and other people can do to the
// objects. Each test failed on the code it was written against.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// Schedule: `release --force` while the holder is alive (the fault model:
// "release --force at any moment"). Two holders for up to a renewal
// interval are the operator's doing (the command says: only when the
// holder is known to be dead), but the successor must not also hard-link
// the live holder's files: a forced release is marked, and its successor
// copies.
func TestForceReleaseOfALiveHolderIsNotAGracefulTakeover(t *testing.T) {
	srv := s3test.NewFake(t)
	direct := newRepo(t, srv, "")
	holder := newProvider(t, direct, fastConfig(t, "holder", 1, newLossRecorder()))
	acquire(t, holder, 5*time.Second)

	if _, err := nodeid.ForceRelease(context.Background(), direct, 0, 0, "operator"); err != nil {
		t.Fatal(err)
	}
	rec, err := direct.Get(context.Background(), 0)
	if err != nil || !rec.Lease.Forced || rec.Lease.Held() {
		t.Fatalf("forced release reads back as %+v, %v", rec.Lease, err)
	}
	succ := newProvider(t, direct, fastConfig(t, "successor", 1, nil))
	inst := acquire(t, succ, 5*time.Second)
	if succ.PreviousGracefullyShutdown() {
		t.Fatalf("successor %v after release --force believes its predecessor stopped gracefully: it would hard-link the live holder's files", inst)
	}
	waitFor(t, 3*time.Second, "the old holder to fence itself", func() bool { return !holder.Valid() })
}

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

// Schedule: someone writes a lease whose knownVersionMappings name an
// absurd version (MaxInt64) for node 0. The next taker computed 1 +
// MaxInt64, which wrapped to a negative version. Versions above
// nodeid.MaxVersion now make the object corrupt: it is skipped, never taken.
func TestHugeKnownVersionIsCorruptNotWrapped(t *testing.T) {
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
	if _, err := direct.Get(context.Background(), 0); !errors.Is(err, nodeid.ErrCorruptLease) {
		t.Fatalf("a mapping of version MaxInt64 reads as %v, want ErrCorruptLease", err)
	}

	cfg := fastConfig(t, "task", 1, nil)
	cfg.AcquireTimeout = 500 * time.Millisecond
	p := newProvider(t, direct, cfg)
	inst, err := p.Acquire(context.Background())
	if !errors.Is(err, nodeid.ErrAcquireTimeout) {
		t.Fatalf("took %v (err %v) from a corrupt object", inst, err)
	}
}
