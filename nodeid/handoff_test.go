package nodeid_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/faultproxy"
	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

func TestHandOffThenAdoptKeepsTheLease(t *testing.T) {
	srv := s3test.NewFake(t)
	repo := newRepo(t, srv, "")
	var events []nodeid.EventKind
	cfg := fastConfig(t, "task-1", 1, nil)
	cfg.OnEvent = func(e nodeid.Event) { events = append(events, e.Kind) }
	first := newProvider(t, repo, cfg)
	inst := acquire(t, first, 5*time.Second)
	h, err := first.HandOff(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if first.Valid() || h.Instance != inst || h.ETag == "" {
		t.Fatalf("after hand-off: valid=%v handoff=%+v", first.Valid(), h)
	}
	rec, _ := repo.Get(context.Background(), inst.ID)
	if rec.Lease.TaskID != "task-1" || rec.ETag != h.ETag {
		t.Fatalf("hand-off released or changed the lease: %+v", rec.Lease)
	}
	if len(events) < 2 || events[0] != nodeid.EventAcquireAttempt || events[len(events)-1] != nodeid.EventHandedOff {
		t.Errorf("events %v", events)
	}

	second := newProvider(t, repo, fastConfig(t, "task-1", 1, nil))
	got, err := second.Adopt(context.Background(), h)
	if err != nil || got != inst {
		t.Fatalf("adopt: %v %v", got, err)
	}
	time.Sleep(2500 * time.Millisecond) // longer than the lease
	if !second.Valid() || second.Stats().Renewals < 3 {
		t.Fatalf("adopter: valid=%v renewals=%d", second.Valid(), second.Stats().Renewals)
	}
}

func TestAdoptRefusesAnExpiredOrForeignHandOff(t *testing.T) {
	srv := s3test.NewFake(t)
	repo := newRepo(t, srv, "")
	_, h := acquireAndHandOff(t, repo)
	other := newProvider(t, repo, fastConfig(t, "task-2", 1, nil))
	if _, err := other.Adopt(context.Background(), h); !errors.Is(err, nodeid.ErrInvalidConfig) {
		t.Fatalf("foreign hand-off: %v", err)
	}
	expired := h
	expired.ValidUntilBoottimeNs = 1
	late := newProvider(t, repo, fastConfig(t, "task-1", 1, nil))
	if _, err := late.Adopt(context.Background(), expired); !errors.Is(err, nodeid.ErrLeaseLost) {
		t.Fatalf("expired hand-off: %v", err)
	}
}

func TestAdoptAfterTheLeaseChangedIsALoss(t *testing.T) {
	srv := s3test.NewFake(t)
	repo := newRepo(t, srv, "")
	inst, h := acquireAndHandOff(t, repo)
	body, meta := foreignLease("intruder", inst.ID, int64(inst.Version)+1)
	putRaw(t, srv, nodeid.LeaseKey(testPrefix, inst.ID), body, meta)
	lost := newLossRecorder()
	adopter := newProvider(t, repo, fastConfig(t, "task-1", 1, lost))
	if _, err := adopter.Adopt(context.Background(), h); !errors.Is(err, nodeid.ErrLeaseLost) {
		t.Fatalf("adopting an overwritten lease: %v", err)
	}
	if adopter.Valid() {
		t.Fatal("adopter valid after a failed adoption")
	}
}

// acquireAndHandOff has a task "task-1" of a one-node cluster on repo take
// an ID and hand it off, as before an exec: it returns what was acquired
// and the hand-off, for a test of what an adopter makes of it.
func acquireAndHandOff(t *testing.T, repo nodeid.Repository) (nodeid.NodeInstance, nodeid.Handoff) {
	t.Helper()
	first := newProvider(t, repo, fastConfig(t, "task-1", 1, nil))
	inst := acquire(t, first, 5*time.Second)
	h, err := first.HandOff(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return inst, h
}

// handOffAfterALostRenewal lets first renew once through proxy with the
// answer dropped, then hands off: the hand-off carries that renewal, which
// landed, as pending.
func handOffAfterALostRenewal(t *testing.T, first *nodeid.Provider, proxy *faultproxy.Proxy) nodeid.Handoff {
	t.Helper()
	proxy.Set(faultproxy.Fault{Methods: []string{http.MethodPut}, DropResponse: true})
	waitFor(t, 3*time.Second, "a renewal whose answer was dropped", func() bool { return proxy.Stats().Dropped >= 1 })
	h, err := first.HandOff(context.Background())
	if err != nil {
		t.Fatalf("hand-off: %v", err)
	}
	proxy.Pass()
	if len(h.Pending) == 0 {
		t.Fatalf("hand-off carries no pending renewal: %+v", h)
	}
	return h
}
