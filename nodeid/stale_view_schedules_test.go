package nodeid_test

// Schedules from the second adversarial review of the protocol: a task
// whose view of the bucket is stale recreates a deleted object as never
// held; a rejected renewal that cannot read the object; a holder that stays
// valid while it restores its object. Each broke an invariant before its
// fix (unfreshen, reconcile restoring lower versions, loseRestoring).

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/camunda"
	"github.com/nodeid/nodeid/internal/faultproxy"
	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// pauseAfterFirstList is a repository whose first List answer arrives and
// then the task is paused (SIGSTOP, a long GC, a starved goroutine) until
// gate is closed: the task goes on from a listing taken long before.
type pauseAfterFirstList struct {
	nodeid.Repository
	once   sync.Once
	listed chan struct{}
	gate   chan struct{}
}

func (r *pauseAfterFirstList) List(ctx context.Context) (nodeid.Listing, error) {
	l, err := r.Repository.List(ctx)
	first := false
	r.once.Do(func() { first = true })
	if first {
		close(r.listed)
		<-r.gate
	}
	return l, err
}

// Schedule (invariant 2, pure nodeid, N = 1):
//
//  1. Task W starts on an empty bucket, LISTs (nothing, no marker) and is
//     paused right after the answer arrives.
//  2. The cluster runs meanwhile: bootstrap, tenures a (v1) and b (v2),
//     the holder takes v3.
//  3. Right after one of the holder's renewals, an operator deletes 0.json.
//  4. W resumes, goes on from its listing: no marker seen, no objects, so
//     "fresh": it creates 0.json as a NEVER-HELD object at version 0
//     (If-None-Match: * succeeds, the object is gone). Its CreateMarker gets
//     412, which is ignored.
//  5. The holder's next renewal gets 412; reconcile reads a never-held
//     object, "lease released by someone else", and stops WITHOUT putting
//     its version back (recreateDeleted runs only over a 404 or a
//     `recreated-by:` lease).
//  6. W judges its own never-held object like a held lease (the marker does
//     not name it), waits L + 1 s, surveys every lease (all say v0) and
//     takes v1: a version handed out before (to a), and below the v3 the
//     holder had. The object's version went 3 -> 0 -> 1.
//
// The same happens with a listing that is merely stale (fault model: stale
// listings) instead of a paused task.
func TestPausedTaskNeverRecreatesADeletedObjectAsNeverHeld(t *testing.T) {
	srv := s3test.NewFake(t)
	direct := newRepo(t, srv, "")

	paused := &pauseAfterFirstList{Repository: direct, listed: make(chan struct{}), gate: make(chan struct{})}
	wCfg := fastConfig(t, "w", 1, newLossRecorder())
	w := newProvider(t, paused, wCfg)
	got := acquireAsync(w)
	<-paused.listed // W has its (empty) listing and is paused

	first := cycle(t, direct, "a", 1)
	cycle(t, direct, "b", 1)

	// Just after a renewal: the holder's next one is R away.
	_, held := holderJustRenewed(t, direct)
	t.Logf("a held %v; the holder holds %v", first, held)
	deleteRaw(t, srv, nodeid.LeaseKey(testPrefix, 0))
	close(paused.gate) // W resumes

	res := <-got
	if res.err != nil {
		t.Fatalf("W: %v", res.err)
	}
	t.Logf("W took %v after the holder's %v", res.inst, held)
	if res.inst.Version <= held.Version {
		t.Fatalf("W took %v after %v was handed out: the version went down (and v%d repeats a's tenure %v)",
			res.inst, held, res.inst.Version, first)
	}
}

// Schedule (invariant 1, mixed operation with Camunda 8.9): the same paused
// (or stale-listing) task as above writes a NEVER-HELD body, the JSON literal
// null, over the deleted object of a live nodeid holder. nodeid judges such
// an object like a held lease (the marker does not name it), but Camunda's
// provider reads null as "no lease": a Camunda broker takes the ID at once,
// while the nodeid holder still believes it holds it (until its next renewal
// gets 412, or until s + L - m if it cannot reach S3). Without nodeid in
// the bucket, a deleted object only makes Camunda's acquire fail (the marker
// exists, so it never bootstraps again).
//
// The mixed-operation conditions hold: nodeid's L = Camunda's, no clock
// skew at all.
func TestRecreationInARunClusterDoesNotLetCamundaTakeALiveLease(t *testing.T) {
	srv := s3test.NewFake(t)
	direct := rootRepo(t, srv)

	paused := &pauseAfterFirstList{Repository: direct, listed: make(chan struct{}), gate: make(chan struct{})}
	w := newProvider(t, paused, fastConfig(t, "w", 1, newLossRecorder()))
	wGot := acquireAsync(w)
	<-paused.listed

	holder, held := holderJustRenewed(t, direct) // valid for L - m, next renewal in R

	deleteRaw(t, srv, nodeid.LeaseKey("", 0))
	close(paused.gate)
	// W creates 0.json as never held, finds the marker does not name it
	// and rewrites it at once as an expiring lease of an unknown holder
	// (or the holder, finding it below its version, restores it at its
	// own). From then on Camunda reads it as held. Between the create and
	// the rewrite (a few requests) a Camunda broker could still take it:
	// the residual window of docs/design.md, "Mixed operation".
	client := srv.Client(t)
	waitFor(t, 5*time.Second, "0.json to read as held to Camunda", func() bool {
		s, _, err := camunda.Get(context.Background(), client, srv.Bucket, 0, 0)
		return err == nil && s.Initialized && s.Version >= int64(held.Version)
	})

	c := &camunda.Broker{Client: client, Bucket: srv.Bucket, TaskID: "camunda-x", N: 1, LeaseDuration: 2 * time.Second}
	id, v, err := c.Acquire(context.Background())
	holderValid := holder.Valid()
	if err == nil && holderValid {
		t.Fatalf("camunda broker took node %d v%d while the nodeid holder (%v) is valid: two holders", id, v, held)
	}
	if err == nil && v <= int64(held.Version) {
		t.Fatalf("camunda broker took node %d v%d, not above the holder's %v", id, v, held)
	}
	t.Logf("camunda acquire: node %d v%d err=%v; holder valid=%v", id, v, err, holderValid)
	_ = wGot
}

// Schedule (invariant 3; docs/design.md failure table "lease object
// overwritten from outside | next renewal: 412 ... -> lost within R"):
// the holder has no write whose answer was lost (nothing pending), so a 412
// can only mean that someone else wrote the object. Its renewal is
// rejected with 412, and the GET that reconcile sends to look at the object
// fails (503, a timeout): reconcile returns "cannot tell yet" and the
// holder goes on believing it holds the ID, retrying (412, failed GET, ...)
// until its self-fence deadline, L - m after its last successful renewal.
func TestRejectedRenewalWithAFailingReadStopsTheHolderWithinT(t *testing.T) {
	srv := s3test.NewFake(t)
	proxy := startProxy(t, srv)
	var rejected firstEvent
	// roomyConfig: the self-fence deadline is at least L - m - R = 6 s after
	// the rejection, far from the T (0.8 s) the fixed holder needs, so a
	// loaded machine cannot blur the two.
	cfg := roomyConfig(t, "holder", 1, newLossRecorder())
	cfg.OnEvent = rejected.onEvent(func(e nodeid.Event) bool {
		return e.Kind == nodeid.EventRenewalFailed && errors.Is(e.Err, nodeid.ErrPreconditionFailed)
	})
	holder := newProvider(t, newRepo(t, srv, proxy.URL), cfg)
	held := acquire(t, holder, 5*time.Second)

	// Reads fail for the holder from now on; writes still pass.
	proxy.Set(faultproxy.Fault{Methods: []string{http.MethodGet}, Status: http.StatusServiceUnavailable})
	body, meta := foreignLease("someone-else", 0, int64(held.Version)+1)
	putRaw(t, srv, nodeid.LeaseKey(testPrefix, 0), body, meta)

	waitFor(t, 5*time.Second, "a rejected renewal", func() bool { return !rejected.at().IsZero() })
	at := rejected.at()
	waitFor(t, 10*time.Second, "the holder to stop", func() bool { return !holder.Valid() })
	stayed := time.Since(at)
	// One GET (bounded by T) is all reconcile needs to decide; allow that
	// and scheduling delay, still far below the deadline.
	if stayed > cfg.RequestTimeout+2*time.Second {
		t.Fatalf("holder %v stayed valid %v after its renewal was rejected with 412 (nothing of its own was pending); it stopped only at its self-fence deadline",
			held, stayed.Round(time.Millisecond))
	}
}

// Schedule (invariant 3): the holder's renewal is rejected with 404 (its
// object was deleted). Before it stops, it recreates the object
// (recreateDeleted, one PUT bounded by min(T, deadline)), and all that
// time it still reports Valid(): a rejected holder keeps acting for up to
// a request timeout (2.5 s by default) instead of stopping at once. Here
// the recreation PUT is slow (300 ms of latency).
func TestHolderStopsBeforeRecreatingItsDeletedObject(t *testing.T) {
	srv := s3test.NewFake(t)
	proxy := startProxy(t, srv)
	var rejected firstEvent
	cfg := fastConfig(t, "holder", 1, newLossRecorder())
	cfg.OnEvent = rejected.onEvent(func(e nodeid.Event) bool { return e.Kind == nodeid.EventRenewalFailed })
	holder := newProvider(t, newRepo(t, srv, proxy.URL), cfg)
	held := acquire(t, holder, 5*time.Second)

	// Every PUT is slow from now on (below T): the recreation is one.
	proxy.Set(faultproxy.Fault{Methods: []string{http.MethodPut}, Latency: 300 * time.Millisecond})
	deleteRaw(t, srv, nodeid.LeaseKey(testPrefix, 0))
	var at time.Time
	waitFor(t, 3*time.Second, "a rejected renewal (404, or 412 then a GET's 404)", func() bool {
		at = rejected.at()
		return !at.IsZero()
	})
	time.Sleep(100 * time.Millisecond)
	if holder.Valid() {
		t.Fatalf("holder %v still valid %v after its renewal was rejected (its object is gone; it is writing the recreation first)",
			held, time.Since(at).Round(time.Millisecond))
	}
}

// staleFirstList answers its first List with a snapshot of the bucket from
// before the cluster existed (empty, no marker): a stale listing.
type staleFirstList struct {
	nodeid.Repository
	once sync.Once
}

func (r *staleFirstList) List(ctx context.Context) (nodeid.Listing, error) {
	l, err := r.Repository.List(ctx)
	r.once.Do(func() { l = nodeid.Listing{ServerDate: l.ServerDate} })
	return l, err
}

// The first schedule with a stale listing instead of a paused task: the
// spare starts after the delete, and its first listing is stale.
func TestStaleListingNeverRecreatesADeletedObjectAsNeverHeld(t *testing.T) {
	srv := s3test.NewFake(t)
	direct := newRepo(t, srv, "")
	first := cycle(t, direct, "a", 1)
	cycle(t, direct, "b", 1)
	_, held := holderJustRenewed(t, direct)
	deleteRaw(t, srv, nodeid.LeaseKey(testPrefix, 0))

	w := newProvider(t, &staleFirstList{Repository: direct}, fastConfig(t, "w", 1, newLossRecorder()))
	inst := acquire(t, w, 10*time.Second)
	if inst.Version <= held.Version {
		t.Fatalf("W took %v after %v was handed out: the version went down (v%d was a's, %v)", inst, held, inst.Version, first)
	}
}

// holderJustRenewed has task "holder" acquire node 0 of a one-node cluster
// on repo and returns just after one of its renewals: its next one is R
// away.
func holderJustRenewed(t *testing.T, repo nodeid.Repository) (*nodeid.Provider, nodeid.NodeInstance) {
	t.Helper()
	renewed := make(chan struct{}, 100)
	cfg := fastConfig(t, "holder", 1, newLossRecorder())
	cfg.OnEvent = func(e nodeid.Event) {
		if e.Kind == nodeid.EventRenewed {
			select {
			case renewed <- struct{}{}:
			default:
			}
		}
	}
	holder := newProvider(t, repo, cfg)
	held := acquire(t, holder, 5*time.Second)
	for len(renewed) > 0 {
		<-renewed
	}
	<-renewed
	return holder, held
}

// firstEvent records when the first event of a kind arrived.
type firstEvent struct {
	mu    sync.Mutex
	first time.Time
}

// onEvent returns an OnEvent handler that records the first event for
// which match holds.
func (f *firstEvent) onEvent(match func(nodeid.Event) bool) func(nodeid.Event) {
	return func(e nodeid.Event) {
		if match(e) {
			f.mu.Lock()
			if f.first.IsZero() {
				f.first = time.Now()
			}
			f.mu.Unlock()
		}
	}
}

// at returns when the first matching event arrived; zero before.
func (f *firstEvent) at() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.first
}
