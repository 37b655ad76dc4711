package nodeid_test

// From an adversarial review: the cluster marker's freshness proof.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/faultproxy"
	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// gatedRepo records the leases a task creates (so the test can replay one
// byte for byte, as a network that duplicates a request does) and holds the
// task's first Write until the gate opens.
type gatedRepo struct {
	nodeid.Repository
	mu      sync.Mutex
	creates []nodeid.Lease
	writes  int
	waiting chan struct{} // closed when the first Write waits at the gate
	gate    chan struct{}
}

func (r *gatedRepo) Create(ctx context.Context, l nodeid.Lease) (string, error) {
	r.mu.Lock()
	r.creates = append(r.creates, l)
	r.mu.Unlock()
	return r.Repository.Create(ctx, l)
}

func (r *gatedRepo) Write(ctx context.Context, l nodeid.Lease, etag string) (string, error) {
	r.mu.Lock()
	r.writes++
	first := r.writes == 1
	r.mu.Unlock()
	if first {
		close(r.waiting)
		select {
		case <-r.gate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return r.Repository.Write(ctx, l, etag)
}

// Schedule: task "boot" bootstraps node 0 (create E0, body B0) and creates
// the cluster marker {0: E0}. It keeps that marker as p.marker, WITHOUT its
// LastModified (b.marker is built locally). Its take PUT is slow; task
// "holder" reads the marker from S3 and takes node 0 first (v1, graceful);
// boot's take gets 412 and boot keeps polling with its cached marker.
// The holder then cannot reach S3 (valid until s + L - m). Seconds later an
// operator deletes 0.json and the network delivers a duplicate of boot's
// original create (If-None-Match: *, body B0): node 0 is a never-held
// object with ETag E0 again, Last-Modified seconds after the marker's. Any
// other task would refuse it (Last-Modified > marker's), but boot's
// provesFresh sees marker.LastModified zero, skips that check, and takes
// node 0 at once, v1 again, previous_graceful=true, while the holder is
// valid: invariants 1, 2 and 3 together. design.md says this residue
// needs "all within the marker's own second"; for the marker's creator it
// is unbounded in time.
func TestMarkerCreatorChecksTheLastModifiedToo(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		direct := newRepo(t, srv, "")
		gated := &gatedRepo{Repository: direct, waiting: make(chan struct{}), gate: make(chan struct{})}
		bootCfg := slowTakeConfig(t, "boot", 1, 2*time.Second) // T = 4s: the gate fits in it
		bootCfg.PollInterval = 100 * time.Millisecond
		boot := newProvider(t, gated, bootCfg)
		bootRes := acquireAsync(boot)
		select {
		case <-gated.waiting:
		case r := <-bootRes:
			t.Fatalf("boot finished before its take: %v %v", r.inst, r.err)
		case <-time.After(5 * time.Second):
			t.Fatal("boot never sent its take")
		}

		proxy := startProxy(t, srv)
		hcfg := fastConfig(t, "holder", 1, newLossRecorder())
		hcfg.LeaseDuration, hcfg.RenewInterval, hcfg.SafetyMargin, hcfg.RequestTimeout = 6*time.Second, 2*time.Second, 1200*time.Millisecond, time.Second
		holder := newProvider(t, newRepo(t, srv, proxy.URL), hcfg)
		hinst := acquire(t, holder, 5*time.Second)
		if !holder.PreviousGracefullyShutdown() {
			t.Fatalf("holder took %v not as never held", hinst)
		}
		proxy.Set(faultproxy.Fault{Blackhole: true}) // the holder cannot reach S3 from here on
		close(gated.gate)                            // boot's take: 412, it keeps polling

		// Well past the marker's second, so the Last-Modified check would refuse it.
		time.Sleep(1500 * time.Millisecond)
		if !holder.Valid() {
			t.Fatal("holder not valid before the delete")
		}
		deleteRaw(t, srv, nodeid.LeaseKey(testPrefix, 0))
		gated.mu.Lock()
		dup := gated.creates[0]
		gated.mu.Unlock()
		etag, err := direct.Create(context.Background(), dup) // the duplicated bootstrap request lands
		if err != nil {
			t.Fatalf("duplicate create: %v", err)
		}
		m, err := direct.Marker(context.Background())
		if err != nil || m.Bootstrap[0] != etag {
			t.Fatalf("duplicate has ETag %s, marker %+v (%v): not the bootstrap ETag", etag, m, err)
		}
		rec, _ := direct.Get(context.Background(), 0)
		t.Logf("duplicate Last-Modified %v, marker Last-Modified %v", rec.LastModified, m.LastModified)

		select {
		case r := <-bootRes:
			if r.err != nil {
				t.Fatalf("boot: %v", r.err)
			}
			if holder.Valid() && boot.Valid() {
				t.Fatalf("two valid holders of node 0: holder %v and boot %v (boot previous_graceful=%v)",
					hinst, r.inst, boot.PreviousGracefullyShutdown())
			}
			t.Logf("boot took %v after the holder's deadline", r.inst)
		case <-time.After(time.Duration(float64(hcfg.LeaseDuration-hcfg.SafetyMargin) * 0.5)):
			t.Logf("boot did not take node 0 while the holder was valid")
		}
	})
}
