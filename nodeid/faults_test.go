package nodeid_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodeid/nodeid/clock"
	"github.com/nodeid/nodeid/internal/faultproxy"
	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// S3 blackholed for the holder: it must fence itself before any other task
// could take its lease.
func TestBlackholedHolderIsFencedBeforeItsLeaseExpiresForOthers(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		proxy := startProxy(t, srv)
		lost := newLossRecorder()
		holderCfg := fastConfig(t, "holder", 1, lost)
		clk := clock.Real() // the holder's, so its deadline can be compared
		holderCfg.Clock = clk
		holder := newProvider(t, newRepo(t, srv, proxy.URL), holderCfg)
		acquire(t, holder, 5*time.Second)
		waitFor(t, 3*time.Second, "a renewal", func() bool { return holder.Stats().Renewals > 0 })

		proxy.Set(faultproxy.Fault{Blackhole: true})
		blackholedClk, blackholed := clk.Now(), time.Now()
		candidate := newProvider(t, newRepo(t, srv, ""), fastConfig(t, "candidate", 1, nil))
		inst := acquire(t, candidate, 15*time.Second)
		tookOver := time.Now()

		if lost.count() != 1 {
			t.Fatalf("holder losses: %d, want 1", lost.count())
		}
		lostAt := lost.at[0]
		if !lostAt.Before(tookOver) {
			t.Fatalf("holder fenced at %v, candidate took over at %v: two holders", lostAt.Sub(blackholed), tookOver.Sub(blackholed))
		}
		if !strings.Contains(lost.errs[0].Error(), "self-fence deadline") {
			t.Errorf("loss reason %v, want the self-fence deadline", lost.errs[0])
		}
		// Its deadline, which the watchdog enforces, was at most L - m after
		// blackholing: its last successful renewal was sent before that.
		// (When the watchdog's timer fired is up to the scheduler; that it
		// fired before the takeover is checked above.)
		deadline, _ := holder.Deadline()
		if limit := blackholedClk.Add(holderCfg.LeaseDuration - holderCfg.SafetyMargin); deadline.After(limit) {
			t.Errorf("holder's self-fence deadline %v after losing S3, want <= L - m = %v", deadline.Sub(blackholedClk), holderCfg.LeaseDuration-holderCfg.SafetyMargin)
		}
		if s := holder.Stats(); s.SelfFences != 1 {
			t.Errorf("stats %+v, want one self-fence", s)
		}
		if inst.Version != 2 {
			t.Errorf("candidate got %v, want version 2", inst)
		}
		t.Logf("fenced after %v, taken over after %v", lostAt.Sub(blackholed).Round(time.Millisecond), tookOver.Sub(blackholed).Round(time.Millisecond))
	})
}

// A renewal whose write landed but whose answer was lost makes the next
// renewal fail with 412 against our own write: that is not a loss.
func TestLostAnswerOfALandedRenewalIsNotALoss(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		proxy := startProxy(t, srv)
		cfg, book := withLogBook(t, roomyConfig(t, "holder", 1, nil))
		holder := newProvider(t, newRepo(t, srv, proxy.URL), cfg)
		inst := acquire(t, holder, 5*time.Second)
		before := proxy.Stats().Dropped
		proxy.DropNext(http.MethodPut, 1)
		waitFor(t, 3*time.Second, "the dropped answer", func() bool { return proxy.Stats().Dropped > before })
		// The renewal after the lost answer gets 412 against our own write;
		// reconcile must recognise it by its nonce.
		const landed = "renewal had landed although its answer was lost"
		waitFor(t, 3*cfg.LeaseDuration, "the reconcile of the 412", func() bool { return book.count(landed) > 0 || !holder.Valid() })
		renewals := holder.Stats().Renewals
		waitFor(t, 3*cfg.LeaseDuration, "renewals after the reconcile", func() bool { return holder.Stats().Renewals >= renewals+2 || !holder.Valid() })
		if !holder.Valid() {
			t.Fatalf("holder lost its lease after a lost answer: %v", holder.Err())
		}
		if book.count(landed) != 1 {
			t.Errorf("%q logged %d times, want once", landed, book.count(landed))
		}
		if holder.Stats().RenewalFailures < 1 {
			t.Error("the dropped answer was not seen as a failed renewal")
		}
		rec, err := newRepo(t, srv, "").Get(context.Background(), inst.ID)
		if err != nil || rec.Lease.TaskID != "holder" || rec.Lease.Instance != inst {
			t.Fatalf("lease after recovery: %+v, %v", rec.Lease, err)
		}
	})
}

// 409 ConditionalRequestConflict means nothing landed: re-read and retry.
func TestConflictIsRetried(t *testing.T) {
	srv := s3test.NewFake(t)
	proxy := startProxy(t, srv)
	// Cluster size 1: the refresh loop reads no peer, so every Get after
	// the acquisition is a reconcile's.
	repo := newCountingRepo(newRepo(t, srv, proxy.URL))
	cfg := roomyConfig(t, "holder", 1, nil)
	var conflicts atomic.Int64
	cfg.OnEvent = func(e nodeid.Event) {
		if e.Kind == nodeid.EventRenewalFailed && errors.Is(e.Err, nodeid.ErrConflict) {
			conflicts.Add(1)
		}
	}
	holder := newProvider(t, repo, cfg)
	acquire(t, holder, 5*time.Second)
	gets := repo.count("get")
	proxy.Set(faultproxy.Fault{Methods: []string{http.MethodPut}, Status: http.StatusConflict, ErrorCode: "ConditionalRequestConflict"})
	waitFor(t, 3*cfg.LeaseDuration, "two 409s", func() bool { return conflicts.Load() >= 2 || !holder.Valid() })
	proxy.Pass()
	renewals := holder.Stats().Renewals
	waitFor(t, 3*cfg.LeaseDuration, "a renewal after the conflicts", func() bool { return holder.Stats().Renewals > renewals || !holder.Valid() })
	if !holder.Valid() {
		t.Fatalf("holder lost its lease over 409s: %v", holder.Err())
	}
	// Each 409 was reconciled: the object was read to see that nothing
	// landed, before the renewal was retried.
	if n := repo.count("get") - gets; int64(n) < conflicts.Load() {
		t.Errorf("%d reads after %d conflicts: not every 409 was reconciled", n, conflicts.Load())
	}
}

// 503 SlowDown and latency below the renewal budget must not cost the lease.
func TestSlowDownBelowTheBudgetIsNotALoss(t *testing.T) {
	srv := s3test.NewFake(t)
	proxy := startProxy(t, srv)
	holder := newProvider(t, newRepo(t, srv, proxy.URL), fastConfig(t, "holder", 1, nil))
	acquire(t, holder, 5*time.Second)
	proxy.Set(faultproxy.Fault{Status: http.StatusServiceUnavailable, ErrorCode: "SlowDown", Probability: 0.3, Seed: 7,
		Latency: 50 * time.Millisecond, Jitter: 50 * time.Millisecond})
	time.Sleep(4 * time.Second)
	if !holder.Valid() {
		t.Fatalf("holder lost its lease to 30%% 503s: %v", holder.Err())
	}
	if holder.Stats().RenewalFailures == 0 {
		t.Error("no renewal failed: the fault was not exercised")
	}
}

func TestProbeAcceptsServersThatEnforceConditionalWrites(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		repo := newRepo(t, srv, "")
		for i := 0; i < 2; i++ { // twice: the probe object exists the second time
			if err := repo.Probe(context.Background()); err != nil {
				t.Fatalf("probe %d: %v", i, err)
			}
		}
		listing, err := repo.List(context.Background())
		if err != nil || len(listing.Slots) != 0 {
			t.Fatalf("the probe object shows up as a lease: %+v %v", listing.Slots, err)
		}
	})
}

func TestProbeRefusesAnEndpointThatIgnoresPreconditions(t *testing.T) {
	srv := s3test.NewFake(t) // VersityGW rejects the altered signature instead
	proxy := startProxy(t, srv)
	proxy.Set(faultproxy.Fault{StripConditional: true})
	err := newRepo(t, srv, proxy.URL).Probe(context.Background())
	if !errors.Is(err, nodeid.ErrConditionalWritesNotEnforced) {
		t.Fatalf("probe through a header-stripping proxy: %v, want ErrConditionalWritesNotEnforced", err)
	}
}

// Tasks that start together all probe at once; none may fail for it.
func TestProbeStorm(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		repo := newRepo(t, srv, "")
		errs := make(chan error, 50)
		for i := 0; i < 50; i++ {
			go func() { errs <- repo.Probe(context.Background()) }()
		}
		for i := 0; i < 50; i++ {
			if err := <-errs; err != nil {
				t.Errorf("probe %d: %v", i, err)
			}
		}
	})
}

// A renewal that landed but whose answer was lost leaves the holder with a
// stale ETag. After a hand-off the adopter renews with that ETag, gets 412
// against its predecessor's own write, and must recognise it by the nonce
// the hand-off carries instead of stopping a healthy task.
func TestAdoptAfterALostRenewalAnswerIsNotALoss(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		proxy := startProxy(t, srv)
		// A lease long enough that the hand-off comes well before the
		// deadline even on a loaded machine.
		slow := func(cfg nodeid.Config) nodeid.Config {
			cfg.LeaseDuration, cfg.RenewInterval, cfg.SafetyMargin, cfg.RequestTimeout = 8*time.Second, time.Second, 2*time.Second, 800*time.Millisecond
			return cfg
		}
		first := newProvider(t, newRepo(t, srv, proxy.URL), slow(fastConfig(t, "task-1", 1, nil)))
		inst := acquire(t, first, 5*time.Second)
		h := handOffAfterALostRenewal(t, first, proxy)
		rec, err := newRepo(t, srv, "").Get(context.Background(), inst.ID)
		if err != nil || rec.ETag == h.ETag {
			t.Fatalf("the dropped renewal did not land (ETag %s, hand-off %s): %v", rec.ETag, h.ETag, err)
		}
		adCfg, book := withLogBook(t, slow(fastConfig(t, "task-1", 1, nil)))
		adopter := newProvider(t, newRepo(t, srv, ""), adCfg)
		if _, err := adopter.Adopt(context.Background(), h); err != nil {
			t.Fatalf("adopting after a landed renewal whose answer was lost: %v", err)
		}
		renewals := adopter.Stats().Renewals
		waitFor(t, 5*adCfg.RenewInterval, "renewals by the adopter", func() bool { return adopter.Stats().Renewals >= renewals+2 || !adopter.Valid() })
		if !adopter.Valid() {
			t.Fatalf("adopter not valid: %v", adopter.Err())
		}
		// Its first renewal met the predecessor's landed write (412) and
		// recognised it by the hand-off's nonce.
		if s := adopter.Stats(); s.RenewalFailures < 1 || book.count("renewal had landed although its answer was lost") != 1 {
			t.Errorf("stats %+v: the adopter did not reconcile a 412 against its predecessor's landed renewal", s)
		}
	})
}
