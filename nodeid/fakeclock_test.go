package nodeid_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/clock"
	"github.com/nodeid/nodeid/clock/clocktest"
	"github.com/nodeid/nodeid/internal/faultproxy"
	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// These tests run the provider on fake clocks: one for the S3 server (its
// Date and Last-Modified) and one per task, so each timing rule is checked
// at its exact boundary.

var epoch = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func fakeClockConfig(t *testing.T, task string, clk clock.Clock) nodeid.Config {
	cfg := fastConfig(t, task, 1, nil)
	cfg.Clock = clk
	return cfg
}

type acquireResult struct {
	inst nodeid.NodeInstance
	err  error
}

func acquireAsync(p *nodeid.Provider) <-chan acquireResult {
	ch := make(chan acquireResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		inst, err := p.Acquire(ctx)
		ch <- acquireResult{inst, err}
	}()
	return ch
}

// expectWaiting asserts that the candidate is waiting on its clock (it has
// armed its poll timer) and has not acquired.
func expectWaiting(t *testing.T, clk *clocktest.Fake, res <-chan acquireResult, what string) {
	t.Helper()
	if !clk.WaitForTimers(1, 5*time.Second) {
		t.Fatalf("%s: candidate never waited", what)
	}
	select {
	case r := <-res:
		t.Fatalf("%s: candidate acquired %v (err %v)", what, r.inst, r.err)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestServerClockRuleTakesOverAtLeasePlusOneSecond(t *testing.T) {
	server := clocktest.NewFake(epoch)
	srv := s3test.NewFake(t, s3test.WithServerClock(server.Now))
	repo := newRepo(t, srv, "")
	writeDeadLease(t, repo, 0, 1) // Duration 2s, Last-Modified = epoch

	cand := clocktest.NewFake(epoch.Add(-time.Hour)) // its wall clock is irrelevant
	p := newProvider(t, repo, fakeClockConfig(t, "candidate", cand))

	server.Advance(2 * time.Second) // Date - Last-Modified = L: not yet
	res := acquireAsync(p)
	expectWaiting(t, cand, res, "at L")

	server.Advance(time.Second) // = L + 1s: expired by the server's clock
	cand.Advance(p.Config().PollInterval * 2)
	select {
	case r := <-res:
		if r.err != nil || r.inst.Version != 2 {
			t.Fatalf("got %v, %v; want node 0 v2", r.inst, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("candidate did not take a lease expired by the server clock")
	}
}

func TestLocalObservationRuleTakesOverAfterALeaseOfUnchangedETag(t *testing.T) {
	server := clocktest.NewFake(epoch) // frozen: rule 1 never fires
	srv := s3test.NewFake(t, s3test.WithServerClock(server.Now))
	repo := newRepo(t, srv, "")
	writeDeadLease(t, repo, 0, 1)

	cand := clocktest.NewFake(epoch)
	p := newProvider(t, repo, fakeClockConfig(t, "candidate", cand))
	res := acquireAsync(p)
	poll := p.Config().PollInterval
	// Just short of one lease duration of observation: still held.
	for elapsed := time.Duration(0); elapsed+2*poll < 2*time.Second; elapsed += poll {
		expectWaiting(t, cand, res, "before L")
		cand.Advance(poll) // the poll is at most PollInterval
	}
	cand.Advance(time.Second)
	select {
	case r := <-res:
		if r.err != nil || r.inst.Version != 2 {
			t.Fatalf("got %v, %v; want node 0 v2", r.inst, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("candidate did not take a lease unchanged for a whole duration")
	}
}

func TestWatchdogFencesWhileARenewalHangs(t *testing.T) {
	srv := s3test.NewFake(t)
	proxy := startProxy(t, srv)
	holderClock := clocktest.NewFake(epoch)
	lost := newLossRecorder()
	cfg := fakeClockConfig(t, "holder", holderClock)
	// L, R and m count on the fake clock; the request timeout is a real
	// context timeout, long so the renewal still hangs when the watchdog
	// fires, even on a loaded machine.
	cfg.LeaseDuration, cfg.RenewInterval, cfg.SafetyMargin, cfg.RequestTimeout = 40*time.Second, 15*time.Second, 2*time.Second, 10*time.Second
	var p *nodeid.Provider
	failuresAtLoss := make(chan int64, 1)
	cfg.OnLost = func(err error) {
		failuresAtLoss <- p.Stats().RenewalFailures
		lost.onLost(err)
	}
	p = newProvider(t, newRepo(t, srv, proxy.URL), cfg)
	acquire(t, p, 5*time.Second)

	// Renew loop, watchdog and mappings refresh each arm a timer.
	if !holderClock.WaitForTimers(3, 5*time.Second) {
		t.Fatal("holder's loops did not start")
	}
	// Let the renewal start and hang in the blackhole.
	proxy.Set(faultproxy.Fault{Blackhole: true, Methods: []string{http.MethodPut}})
	holderClock.Advance(cfg.RenewInterval)
	waitFor(t, 2*time.Second, "the renewal to hang", func() bool { return proxy.Stats().Blackholed > 0 })
	if !p.Valid() {
		t.Fatal("invalid before the deadline")
	}
	// Move the holder's clock to its deadline: L - m after the acquisition.
	holderClock.Advance(cfg.LeaseDuration - cfg.SafetyMargin - cfg.RenewInterval)
	if p.Valid() {
		t.Fatal("Valid at the self-fence deadline")
	}
	select {
	case err := <-lost.ch:
		if !strings.Contains(err.Error(), "self-fence deadline") {
			t.Fatalf("loss reason %v", err)
		}
	case <-time.After(cfg.RequestTimeout):
		t.Fatal("watchdog did not fire while the renewal hung")
	}
	// The renewal had not returned when the tenure ended: it was the
	// watchdog, not the renewal's failure, that fenced the holder.
	if n := <-failuresAtLoss; n != 0 {
		t.Fatalf("%d renewal failures before the loss: the renewal had stopped hanging", n)
	}
	if proxy.Stats().Blackholed != 1 {
		t.Errorf("proxy stats %+v, want one blackholed renewal", proxy.Stats())
	}
}
