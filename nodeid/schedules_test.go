package nodeid_test

// Regression tests for the schedules an adversarial review used to break the
// invariants (docs/design.md, "Schedules that broke the protocol"). Each
// failed on the code before the fix, on both servers.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/faultproxy"
	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// slowTakeConfig is for a candidate whose take PUT is held in a proxy for
// delay: its request timeout must outlast the delay.
func slowTakeConfig(t *testing.T, task string, size int, delay time.Duration) nodeid.Config {
	cfg := fastConfig(t, task, size, nil)
	cfg.RequestTimeout = delay + 2*time.Second
	cfg.RenewInterval = cfg.RequestTimeout + time.Second
	cfg.SafetyMargin = 2 * time.Second
	cfg.LeaseDuration = 2*cfg.RenewInterval + cfg.SafetyMargin
	return cfg
}

// bootstrapWithLease creates the cluster's objects and its marker, which
// records the cluster's lease duration: no task may use a longer one.
func bootstrapWithLease(t *testing.T, repo nodeid.Repository, size int, lease time.Duration) {
	t.Helper()
	if err := nodeid.Initialize(context.Background(), repo, size, "bootstrap", lease); err != nil {
		t.Fatal(err)
	}
}

// cycle acquires with a fresh task and releases at once: one tenure.
func cycle(t *testing.T, repo nodeid.Repository, task string, size int) nodeid.NodeInstance {
	t.Helper()
	p := newProvider(t, repo, fastConfig(t, task, size, nil))
	inst := acquire(t, p, 10*time.Second)
	if err := p.Close(context.Background()); err != nil {
		t.Fatalf("%s: release: %v", task, err)
	}
	return inst
}

// Schedule 1: every released object used to have an empty body, so the same
// ETag (MD5 of nothing). A candidate that read a released lease and was
// delayed took it after three more tenures had come and gone, and held a
// version that had been handed out before.
func TestDelayedTakeOfAReleasedLeaseAfterOtherTenuresFails(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		direct := newRepo(t, srv, "")
		bootstrapWithLease(t, direct, 1, time.Minute) // room for the late task's longer lease
		first := cycle(t, direct, "x", 1)             // node 0 released at v1

		const delay = 1500 * time.Millisecond
		proxy := startProxy(t, srv)
		proxy.Set(faultproxy.Fault{Methods: []string{http.MethodPut}, Latency: delay})
		lateCfg := slowTakeConfig(t, "late", 1, delay)
		late := newProvider(t, newRepo(t, srv, proxy.URL), lateCfg)
		got := acquireAsync(late)
		waitFor(t, 5*time.Second, "the late task's take PUT in the proxy", func() bool { return proxy.Stats().Delayed >= 1 })
		proxy.Pass() // only that PUT is slow

		var last nodeid.NodeInstance
		for i, task := range []string{"b", "c", "d"} {
			last = cycle(t, direct, task, 1)
			if want := first.Version + nodeid.Version(i+1); last.Version != want {
				t.Fatalf("%s took %v, want version %d", task, last, want)
			}
		}
		res := <-got
		if res.err != nil {
			t.Fatalf("late task: %v", res.err)
		}
		if res.inst.Version <= last.Version {
			t.Fatalf("the late task holds %v after %v was handed out: versions went back", res.inst, last)
		}
	})
}

// Schedule 2: marking a released lease unusable did not change its body, so
// its ETag stayed, and a candidate that read it before the scale-down took
// it afterwards; its renewals wrote acquirable=true again.
func TestScaleDownOfAReleasedIDIsNotUndoneByADelayedTake(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		direct := newRepo(t, srv, "")
		bootstrapWithLease(t, direct, 2, time.Minute)
		holderCfg := fastConfig(t, "x", 2, newLossRecorder())
		holderCfg.AllowedIDs = []int{0}
		holder := newProvider(t, direct, holderCfg)
		acquire(t, holder, 5*time.Second)
		oneCfg := fastConfig(t, "y", 2, nil)
		oneCfg.AllowedIDs = []int{1}
		one := newProvider(t, direct, oneCfg)
		if inst := acquire(t, one, 5*time.Second); inst.ID != 1 {
			t.Fatalf("second task got %v, want node 1", inst)
		}
		if err := one.Close(context.Background()); err != nil { // node 1 released
			t.Fatal(err)
		}

		const delay = 1500 * time.Millisecond
		proxy := startProxy(t, srv)
		proxy.Set(faultproxy.Fault{Methods: []string{http.MethodPut}, Latency: delay})
		cfg := slowTakeConfig(t, "late", 2, delay)
		cfg.AllowedIDs = []int{1}
		cfg.AcquireTimeout = 3 * delay
		late := newProvider(t, newRepo(t, srv, proxy.URL), cfg)
		got := acquireAsync(late)
		waitFor(t, 5*time.Second, "the late task's take PUT in the proxy", func() bool { return proxy.Stats().Delayed >= 1 })
		proxy.Pass()

		if err := nodeid.Scale(context.Background(), direct, 1, "operator", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		res := <-got
		if res.err == nil {
			t.Fatalf("the late task took %v after node 1 was scaled down", res.inst)
		}
		if !errors.Is(res.err, nodeid.ErrAcquireTimeout) {
			t.Fatalf("late task: %v", res.err)
		}
		rec, err := direct.Get(context.Background(), 1)
		if err != nil || rec.Lease.Acquirable || rec.Lease.Held() {
			t.Fatalf("node 1 after the scale-down: %+v, %v", rec.Lease, err)
		}
	})
}

// Schedule 3: a cluster was judged fresh from what was absent. Deleting a
// held object, when no other object showed that the cluster had run, made
// the next task recreate it as never held and take it at once, while the
// holder was still valid.
func TestDeletedHeldObjectIsNotTakenWhileItsHolderIsValid(t *testing.T) {
	for _, size := range []int{1, 2} {
		t.Run(fmt.Sprintf("size%d", size), func(t *testing.T) {
			forEachServer(t, func(t *testing.T, srv *s3test.Server) {
				direct := newRepo(t, srv, "")
				// The holder renews rarely, so its lease stays valid for a
				// while after the delete (as when it cannot reach S3).
				cfg := fastConfig(t, "holder", size, newLossRecorder())
				cfg.LeaseDuration, cfg.RenewInterval, cfg.SafetyMargin, cfg.RequestTimeout = 4*time.Second, 1500*time.Millisecond, 800*time.Millisecond, time.Second
				cfg.AllowedIDs = []int{0}
				holder := newProvider(t, direct, cfg)
				inst := acquire(t, holder, 5*time.Second)
				if inst.ID != 0 {
					t.Fatalf("holder got %v", inst)
				}
				deleteRaw(t, srv, nodeid.LeaseKey(testPrefix, 0))

				spareCfg := fastConfig(t, "spare", size, newLossRecorder())
				spareCfg.LeaseDuration, spareCfg.RenewInterval, spareCfg.SafetyMargin, spareCfg.RequestTimeout = cfg.LeaseDuration, cfg.RenewInterval, cfg.SafetyMargin, cfg.RequestTimeout
				spareCfg.AllowedIDs = []int{0}
				spare := newProvider(t, direct, spareCfg)
				got := acquireAsync(spare)
				// Until the spare holds the ID, the two must never be valid
				// together.
				deadline := time.Now().Add(3 * cfg.LeaseDuration)
				for time.Now().Before(deadline) {
					if spare.Valid() && holder.Valid() {
						t.Fatalf("two valid holders of node 0: the holder (%v) and the spare (%v)", holder.Instance(), spare.Instance())
					}
					select {
					case res := <-got:
						if res.err != nil {
							t.Fatalf("spare: %v", res.err)
						}
						if holder.Valid() {
							t.Fatalf("the spare took %v while the holder is valid", res.inst)
						}
						if res.inst.Version <= inst.Version {
							t.Fatalf("the spare took %v, not above the holder's %v", res.inst, inst)
						}
						return
					case <-time.After(5 * time.Millisecond):
					}
				}
				t.Fatal("the spare never acquired node 0")
			})
		})
	}
}

// A marker deleted while the cluster runs is written again by the next task,
// naming no object: nothing passes for never held any more.
func TestMarkerRewrittenOverARunningClusterNamesNothing(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		direct := newRepo(t, srv, "")
		holder := newProvider(t, direct, fastConfig(t, "holder", 2, newLossRecorder()))
		acquire(t, holder, 5*time.Second)
		m, err := direct.Marker(context.Background())
		if err != nil || len(m.Bootstrap) != 2 {
			t.Fatalf("marker after bootstrap: %+v, %v", m, err)
		}
		deleteRaw(t, srv, nodeid.MarkerKey(testPrefix))
		if err := nodeid.Initialize(context.Background(), direct, 2, "other", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		m, err = direct.Marker(context.Background())
		if err != nil || len(m.Bootstrap) != 0 {
			t.Fatalf("marker rewritten over a held lease: %+v, %v", m, err)
		}
	})
}
