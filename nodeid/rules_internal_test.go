package nodeid

// Direct tests of safety rules that the rest of the suite only reaches by
// chance (issue 28: each survived a mutation of the rule). They drive one
// step of the provider at a time on a fake clock against gofakes3, without
// its loops, so nothing but the rule under test decides the outcome.
// make mutants (mutants/mutants.txt) breaks each rule and runs them.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/nodeid/nodeid/clock/clocktest"
)

const testBucket = "rules"

var internalEpoch = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// writeCounter is a real repository that counts the writes sent through it
// and, with failWrites, answers each write with an outage instead.
type writeCounter struct {
	Repository
	writes     atomic.Int64
	failWrites atomic.Bool
}

func (r *writeCounter) Write(ctx context.Context, l Lease, etag string) (string, error) {
	r.writes.Add(1)
	if r.failWrites.Load() {
		return "", fmt.Errorf("injected: %w", ErrUnavailable)
	}
	return r.Repository.Write(ctx, l, etag)
}

// rulesFixture is a provider on a fake clock, on a fresh gofakes3 bucket,
// whose losses are recorded instead of exiting.
type rulesFixture struct {
	s3    *s3.Client
	repo  *writeCounter
	clk   *clocktest.Fake
	p     *Provider
	lost  chan error
	lease Lease // node 0 at version 3 as the holder last wrote it
	etag  string
}

func newRulesFixture(t *testing.T) *rulesFixture {
	t.Helper()
	f := &rulesFixture{clk: clocktest.NewFake(internalEpoch), lost: make(chan error, 4)}
	// gofakes3 directly: internal/s3test imports this package (through
	// internal/versitygw), which a test inside it cannot import back.
	hs := httptest.NewServer(gofakes3.New(s3mem.New(), gofakes3.WithoutVersioning()).Server())
	t.Cleanup(hs.Close)
	client, err := NewS3Client(context.Background(), S3Config{
		Endpoint: hs.URL, Region: "us-east-1", PathStyle: true, AccessKey: "k", SecretKey: "s",
	})
	if err != nil {
		t.Fatal(err)
	}
	f.s3 = client
	if _, err := client.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(testBucket)}); err != nil {
		t.Fatal(err)
	}
	s3r, err := NewS3Repository(client, testBucket, "c/", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	f.repo = &writeCounter{Repository: s3r}
	f.p, err = NewProvider(f.repo, Config{
		TaskID: "holder", ClusterSize: 1,
		LeaseDuration: 2 * time.Second, RenewInterval: 500 * time.Millisecond,
		SafetyMargin: 400 * time.Millisecond, RequestTimeout: 400 * time.Millisecond,
		PollInterval: 100 * time.Millisecond,
		Clock:        f.clk, Logger: slog.New(slog.DiscardHandler),
		OnLost: func(err error) { f.lost <- err },
	})
	if err != nil {
		t.Fatal(err)
	}
	inst := NodeInstance{ID: 0, Version: 3}
	f.lease = f.p.newLease(inst, VersionMappings{0: 3}, f.clk.Now())
	if f.etag, err = s3r.Create(context.Background(), f.lease); err != nil {
		t.Fatal(err)
	}
	return f
}

// hold makes the provider the holder of node 0 v3 with the given deadline,
// as hold does, but starts none of its loops: the test takes each step.
func (f *rulesFixture) hold(deadline time.Time) {
	p := f.p
	p.mu.Lock()
	defer p.mu.Unlock()
	p.state = stateHolding
	p.instance, p.etag, p.deadline, p.acquired = f.lease.Instance, f.etag, deadline, f.clk.Now()
	p.known = VersionMappings{0: 3}
	p.tlog = p.log.With("node_id", 0, "version", 3)
}

// A renewal due after the self-fence deadline (a process woken late) is not
// sent: the holder fences itself instead. The watchdog usually fences first;
// this is the rule for when the renew loop runs first.
func TestRenewDueAfterTheDeadlineSendsNothing(t *testing.T) {
	f := newRulesFixture(t)
	f.hold(f.clk.Now().Add(time.Second))
	f.clk.Advance(time.Second) // exactly at the deadline: nothing left
	if _, ok := f.p.renew(); ok {
		t.Fatal("renew at the deadline reported the lease still held")
	}
	if n := f.repo.writes.Load(); n != 0 {
		t.Errorf("renew at the deadline sent %d write(s) for a lease it no longer holds", n)
	}
	var le *LostError
	if err := f.p.Err(); !errors.As(err, &le) || le.Reason != reasonSelfFence {
		t.Errorf("Err = %v, want a self-fence", err)
	}
}

// A renewal whose answer was lost and that reconcile finds landed earns
// validity from when it was SENT, not from when reconcile read it.
func TestReconciledRenewalCountsFromItsSendTime(t *testing.T) {
	f := newRulesFixture(t)
	sent := f.clk.Now()
	f.hold(sent.Add(time.Second))
	renewal := f.p.newLease(f.lease.Instance, VersionMappings{0: 3}, sent)
	f.p.mu.Lock()
	f.p.pending[renewal.Nonce] = sent
	f.p.mu.Unlock()
	// It lands; its answer is lost, so the holder still has the old ETag.
	if _, err := f.repo.Repository.Write(context.Background(), renewal, f.etag); err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(700 * time.Millisecond) // the next attempt's 412, reconciled later
	if _, ok := f.p.reconcile(fmt.Errorf("renewal: %w", ErrPreconditionFailed)); !ok {
		t.Fatalf("reconcile lost the lease over our own landed write: %v", f.p.Err())
	}
	got, holding := f.p.Deadline()
	want := sent.Add(2*time.Second - 400*time.Millisecond)
	if !holding || !got.Equal(want) {
		t.Errorf("deadline after the reconcile = %v (holding %v), want send time + L - m = %v (%v later than allowed)",
			got.Sub(sent), holding, want.Sub(sent), got.Sub(want))
	}
}

// Every request of a holder ends at its self-fence deadline when that comes
// before the request timeout: an answer after it must not be waited for.
func TestRequestContextEndsAtTheDeadline(t *testing.T) {
	f := newRulesFixture(t)
	now := f.clk.Now()
	const left = 50 * time.Millisecond // RequestTimeout is 400 ms
	ctx, cancel := f.p.boundedContext(now.Add(left), now)
	defer cancel()
	after := time.Now()
	dl, ok := ctx.Deadline()
	if !ok || dl.Sub(after) > left {
		t.Errorf("request context ends %v from now (set %v), want at most the %v left before the deadline", dl.Sub(after), ok, left)
	}
}

// A holder restoring its deleted object finds that a spare recreated it
// below its version and a scale-down then marked that recreation unusable:
// the mark is the operator's, and the restore leaves it in place.
func TestRestoreLeavesAScaleDownMarkAlone(t *testing.T) {
	f := newRulesFixture(t)
	ctx := context.Background()
	f.delete(t, LeaseKey("c/", 0))
	mark := Lease{TaskID: recreatedPrefix + "spare", Instance: NodeInstance{ID: 0, Version: 1},
		Expires: internalEpoch.Add(time.Hour), Duration: 2 * time.Second, Nonce: "mark", Acquirable: false}
	if _, err := f.repo.Repository.Create(ctx, mark); err != nil {
		t.Fatal(err)
	}
	f.hold(f.clk.Now().Add(time.Second))
	f.p.recreateDeleted(f.lease.Instance, "", f.clk.Now().Add(time.Second))
	rec, err := f.repo.Get(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Lease.Acquirable || rec.Lease.Nonce != "mark" {
		t.Errorf("the scale-down's mark was replaced: %+v", rec.Lease)
	}
}

// After an outside delete in a cluster that has its marker, the bootstrap
// recreates the missing object as an expiring lease at a version (so the
// next take writes above it), never as a never-held object: version 0
// would let the next holder take version 1, which a holder before the
// delete may have had. It is created so at once: a never-held object would
// be rewritten afterwards (unfreshen), but that second write can fail (an
// outage here: every write fails) and leave it behind.
func TestMissingObjectWithAMarkerIsRecreatedAsAnExpiringLease(t *testing.T) {
	f := newRulesFixture(t)
	ctx := context.Background()
	if err := f.repo.CreateMarker(ctx, ClusterMarker{Bootstrap: map[int]string{}, CreatedBy: "boot", ClusterSize: 1, LeaseDuration: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	f.delete(t, LeaseKey("c/", 0))
	listing, err := f.repo.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !listing.MarkerSeen || len(listing.Slots) != 0 {
		t.Fatalf("listing %+v, want the marker and no lease object", listing)
	}
	f.repo.failWrites.Store(true)
	b, err := initializeFrom(ctx, f.repo, listing, 1, "candidate", 2*time.Second, f.p.nonce, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := f.repo.Get(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Lease.Held() || rec.Lease.Instance.Version < 1 || len(b.created) != 1 {
		t.Errorf("object recreated as %+v (held %v), want an expiring lease at version >= 1", rec.Lease, rec.Lease.Held())
	}
}

// Rule 2 counts from the first sight of an ETag: a new ETag, even one
// asked about before see records it, has been seen unchanged for 0. Today
// every caller records the ETag (see) just before asking, so the provider
// cannot show the difference; a caller that asks first must not inherit
// the old ETag's time.
func TestObservationOfANewETagStartsAtZero(t *testing.T) {
	o := observations{}
	o.see(0, `"a"`, internalEpoch)
	later := internalEpoch.Add(time.Hour)
	if got := o.unchangedFor(0, `"b"`, later); got != 0 {
		t.Errorf("unchangedFor a new ETag = %v, want 0", got)
	}
	if got := o.unchangedFor(0, `"a"`, later); got != time.Hour {
		t.Errorf("unchangedFor the seen ETag = %v, want 1h", got)
	}
	o.see(0, `"b"`, later)
	if got := o.unchangedFor(0, `"b"`, later.Add(time.Second)); got != time.Second {
		t.Errorf("after the ETag changed: unchangedFor = %v, want 1s (from the new sight)", got)
	}
}

func (f *rulesFixture) delete(t *testing.T, key string) {
	t.Helper()
	if _, err := f.s3.DeleteObject(context.Background(), &s3.DeleteObjectInput{
		Bucket: aws.String(testBucket), Key: aws.String(key),
	}); err != nil {
		t.Fatal(err)
	}
}
