package nodeid_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// Found by the simulation (seed 1063 of make sim SEEDS=2000, with corrupt
// objects: node 0's object was corrupted, then overwritten from outside at
// v1, while the mappings of nodes 1, 2 and 4 still recorded v2). A take
// reads every lease first so that its version is above all the bucket
// records (Provider.take, surveyLeases), but a GET that failed in that
// survey was skipped: the take went ahead on what it could read and
// repeated a version a peer records. Here the GET of the peer's lease
// answers 503: while it does, nothing is taken; once it answers, the take
// is above the peer's mapping.
func TestTakeAfterAFailedSurveyWaitsForEveryLease(t *testing.T) {
	srv := s3test.NewFake(t)
	ctx := context.Background()
	direct := newRepo(t, srv, "")
	lowerBelowAPeer(t, srv)

	// The taker's GETs of the peer's lease fail (503 SlowDown) while
	// failing is set; every other request reaches the server.
	var failing atomic.Bool
	var failed atomic.Int64
	failing.Store(true)
	peerKey := nodeid.LeaseKey(testPrefix, 1)
	repo := newS3Repo(t, srv, "", testPrefix, 2*time.Second, beforeEveryRequest("failPeerGet", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
		if g, ok := in.Parameters.(*s3.GetObjectInput); ok && failing.Load() && strings.HasSuffix(aws.ToString(g.Key), peerKey) {
			failed.Add(1)
			return middleware.InitializeOutput{}, middleware.Metadata{}, errors.New("injected: 503 SlowDown")
		}
		return next.HandleInitialize(ctx, in)
	}))

	p := newProvider(t, repo, fastConfig(t, "taker", 2, newLossRecorder()))
	res := acquireAsync(p)
	// Several surveys fail; none may take.
	waitFor(t, 10*time.Second, "three failed surveys", func() bool { return failed.Load() >= 3 })
	select {
	case r := <-res:
		t.Fatalf("took %v (err %v) although the survey could not read node 1's lease", r.inst, r.err)
	default:
	}
	if rec, err := direct.Get(ctx, 0); err != nil || rec.Lease.Held() {
		t.Fatalf("node 0 after failed surveys: %+v, %v; want it untaken", rec.Lease, err)
	}
	failing.Store(false)
	select {
	case r := <-res:
		if r.err != nil {
			t.Fatalf("no acquisition once the peer's lease could be read: %v", r.err)
		}
		if r.inst != (nodeid.NodeInstance{ID: 0, Version: 6}) {
			t.Fatalf("took %v, want node 0 at v6 (above the peer's mapping v5)", r.inst)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no acquisition within 10 s once the peer's lease could be read")
	}
}

// ForceRelease surveys every lease the same way: released at a version
// below one an unread lease records, the ID's next holder could repeat it.
// It refuses and writes nothing.
func TestForceReleaseRefusesWhenALeaseCannotBeRead(t *testing.T) {
	srv := s3test.NewFake(t)
	ctx := context.Background()
	direct := newRepo(t, srv, "")
	if err := nodeid.Initialize(ctx, direct, 2, "boot", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	before, err := direct.Get(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var blocked atomic.Bool
	blocked.Store(true)
	_, err = nodeid.ForceRelease(ctx, unreadableWhileRepo{Repository: direct, id: 1, blocked: &blocked}, 0, 0, "operator")
	if !errors.Is(err, nodeid.ErrAccessDenied) {
		t.Fatalf("ForceRelease with node 1 unreadable: %v, want ErrAccessDenied", err)
	}
	if after, err := direct.Get(ctx, 0); err != nil || after.ETag != before.ETag {
		t.Fatalf("node 0 changed by a refused ForceRelease: %+v, %v", after, err)
	}
	if _, err := nodeid.ForceRelease(ctx, direct, 0, 0, "operator"); err != nil {
		t.Fatalf("ForceRelease once every lease reads: %v", err)
	}
}

// lowerBelowAPeer bootstraps two node IDs on srv, then lowers node 0 to a
// release at v1 (an outside write), while node 1 is held by a live peer
// whose mappings record node 0 at v5. It returns the peer's body and
// metadata, for a test that writes them back.
func lowerBelowAPeer(t *testing.T, srv *s3test.Server) (string, map[string]string) {
	t.Helper()
	direct := newRepo(t, srv, "")
	if err := nodeid.Initialize(context.Background(), direct, 2, "boot", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	lowered := nodeid.Lease{Writer: "outsider", Instance: nodeid.NodeInstance{ID: 0, Version: 1}, Nonce: "n0", Acquirable: true}
	body, meta := lowered.Encode()
	putRaw(t, srv, nodeid.LeaseKey(testPrefix, 0), string(body), meta)
	return putLivePeer(t, srv, 3, nodeid.VersionMappings{0: 5, 1: 3})
}

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
	cfg, logs := withLogBook(t, cfg)
	p := newProvider(t, repo, cfg)
	res := acquireAsync(p)
	waitFor(t, 10*time.Second, "the spare to say why it does not take", func() bool {
		return logs.count("not taking the node id: a lease could not be read") > 0
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
