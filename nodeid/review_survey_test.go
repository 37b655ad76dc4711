package nodeid_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// deleteDuringSurveyRepo deletes node 1's object from outside just before
// the taker's survey GETs it (after the candidate, node 0, was read), and
// puts it back right after that GET: the live peer's recreateDeleted (it
// writes its own version and its known mappings back).
type deleteDuringSurveyRepo struct {
	nodeid.Repository
	srv       *s3test.Server
	body      string
	meta      map[string]string
	t         *testing.T
	sawZero   atomic.Bool
	once      sync.Once
	triggered atomic.Bool
}

func (r *deleteDuringSurveyRepo) Get(ctx context.Context, id int) (nodeid.Record, error) {
	if id == 0 {
		r.sawZero.Store(true)
	}
	if id == 1 && r.sawZero.Load() {
		var rec nodeid.Record
		var err error
		hit := false
		r.once.Do(func() {
			hit = true
			deleteRaw(r.t, r.srv, nodeid.LeaseKey(testPrefix, 1))
			rec, err = r.Repository.Get(ctx, id)
			putRaw(r.t, r.srv, nodeid.LeaseKey(testPrefix, 1), r.body, r.meta)
			r.triggered.Store(true)
		})
		if hit {
			return rec, err
		}
	}
	return r.Repository.Get(ctx, id)
}

// From the review of the protocol (REVP-1, fixed: a 404 in the survey
// holds the take back). Same setting as
// TestTakeAfterAFailedSurveyWaitsForEveryLease (node 0 lowered to a release at v1 by an outside write; the live peer on
// node 1 records node 0 at v5), but the peer's object is deleted from
// outside while the taker surveys, and recreated by its live holder right
// after: the survey's GET answers 404, which surveyLeases skips ("a deleted
// object records nothing anyone can read"), and the take goes ahead at v2,
// a version the peer still records as handed out (v5): invariant 2.
func TestTakeWaitsForALeaseDeletedDuringItsSurvey(t *testing.T) {
	srv := s3test.NewFake(t)
	ctx := context.Background()
	direct := newRepo(t, srv, "")
	pbody, pmeta := lowerBelowAPeer(t, srv)

	repo := &deleteDuringSurveyRepo{Repository: direct, srv: srv, body: pbody, meta: pmeta, t: t}
	p := newProvider(t, repo, fastConfig(t, "taker", 2, newLossRecorder()))
	inst := acquire(t, p, 10*time.Second)
	if !repo.triggered.Load() {
		t.Fatalf("schedule not reached: took %v without the survey's 404", inst)
	}
	rec, err := direct.Get(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if inst.ID == 0 && inst.Version <= rec.Lease.KnownVersions[0] {
		t.Fatalf("took %v while the live peer's lease records node 0 at v%d: a version handed out again", inst, rec.Lease.KnownVersions[0])
	}
}

// unreadableWhileRepo answers every GET of one node with 403 while blocked
// is set, as an object written by someone else with a KMS key we may not
// use, or an archived (Glacier) object, does until an operator fixes it.
type unreadableWhileRepo struct {
	nodeid.Repository
	id      int
	blocked *atomic.Bool
}

func (r unreadableWhileRepo) Get(ctx context.Context, id int) (nodeid.Record, error) {
	if id == r.id && r.blocked.Load() {
		return nodeid.Record{}, &nodeid.StorageError{Op: "get", Key: nodeid.LeaseKey(testPrefix, id), Kind: nodeid.ErrAccessDenied, Status: 403, Code: "AccessDenied"}
	}
	return r.Repository.Get(ctx, id)
}

// From the review (REVP-2), a choice documented in docs/design.md: one
// object that cannot be read blocks every takeover, even of an ID its
// holder released (a missed start beats a repeated version). The task
// waits and says why; once the object reads again, the take goes ahead.
func TestOneUnreadableObjectHoldsBackTakeoversUntilItReads(t *testing.T) {
	srv := s3test.NewFake(t)
	ctx := context.Background()
	direct := newRepo(t, srv, "")
	if err := nodeid.Initialize(ctx, direct, 3, "boot", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	released := cycle(t, direct, "a", 3) // taken and released cleanly (v1)
	var blocked atomic.Bool
	blocked.Store(true)
	repo := unreadableWhileRepo{Repository: direct, id: (released.ID + 1) % 3, blocked: &blocked}
	cfg := fastConfig(t, "spare", 3, nil)
	cfg.AllowedIDs = []int{released.ID}
	var logs syncBuffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	p := newProvider(t, repo, cfg)
	res := acquireAsync(p)
	waitFor(t, 10*time.Second, "the spare to say why it does not take", func() bool {
		return strings.Contains(logs.String(), "not taking the node id: a lease could not be read")
	})
	select {
	case r := <-res:
		t.Fatalf("took %v (err %v) while node %d's lease could not be read", r.inst, r.err, repo.id)
	default:
	}
	blocked.Store(false)
	select {
	case r := <-res:
		if r.err != nil || r.inst != (nodeid.NodeInstance{ID: released.ID, Version: released.Version + 1}) {
			t.Fatalf("once every lease reads: %v, %v; want %v at v%d", r.inst, r.err, released.ID, released.Version+1)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no take within 10 s once every lease reads")
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
