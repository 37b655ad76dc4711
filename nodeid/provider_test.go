package nodeid_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeid/nodeid/clock"
	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

func TestRacingProvidersGetDistinctIDs(t *testing.T) {
	const stormLease = time.Minute
	for _, tc := range []struct {
		n         int
		bootstrap bool
	}{{10, false}, {50, false}, {50, true}} {
		n := tc.n
		name := fmt.Sprint(n)
		if tc.bootstrap {
			name += "-bootstrapped"
		}
		t.Run(name, func(t *testing.T) {
			forEachServer(t, func(t *testing.T, srv *s3test.Server) {
				repo := newRepo(t, srv, "")
				if tc.bootstrap {
					if err := nodeid.Initialize(context.Background(), repo, n, "bootstrap", stormLease); err != nil {
						t.Fatal(err)
					}
				}
				before := repo.Requests()
				providers := make([]*nodeid.Provider, n)
				counters := make([]*countingRepo, n)
				for i := range providers {
					// Timing is not the subject: 50 tasks on a loaded
					// machine must not see request timeouts (a take
					// that timed out but landed is taken again at v2
					// once it expires), nor lose their leases to a
					// stall (L - m - R = 34 s). No renewal is due
					// before R = 20 s: with R = 1.2 s the holders'
					// renewals (42 a second) were most of the load of a
					// storm that a loaded machine stretched past R. The
					// refresh loop is pushed out: its reads are not
					// acquisition cost.
					cfg := fastConfig(t, fmt.Sprintf("task-%d", i), n, nil)
					cfg.LeaseDuration, cfg.RenewInterval, cfg.SafetyMargin, cfg.RequestTimeout = stormLease, 20*time.Second, 6*time.Second, 5*time.Second
					cfg.MappingsRefreshInterval = time.Minute
					counters[i] = newCountingRepo(repo)
					providers[i] = newProvider(t, counters[i], cfg)
				}
				got := make([]nodeid.NodeInstance, n)
				errs := make([]error, n)
				valid := make([]bool, n)
				var wg sync.WaitGroup
				start := make(chan struct{})
				for i, p := range providers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
						defer cancel()
						got[i], errs[i] = p.Acquire(ctx)
						valid[i] = p.Valid()
						counters[i].freeze() // what follows is not acquisition
					}()
				}
				close(start)
				wg.Wait()
				seen := map[int]string{}
				for i, inst := range got {
					if errs[i] != nil {
						t.Fatalf("task-%d: %v", i, errs[i])
					}
					if other, dup := seen[inst.ID]; dup {
						t.Fatalf("node %d acquired by task-%d and %s", inst.ID, i, other)
					}
					seen[inst.ID] = fmt.Sprintf("task-%d", i)
					if inst.Version != 1 || inst.ID < 0 || inst.ID >= n {
						t.Errorf("task-%d got %v, want version 1 of an ID in 0..%d", i, inst, n-1)
					}
					if !valid[i] {
						t.Errorf("task-%d: lease not valid right after acquisition", i)
					}
				}
				// Acquisition cost, counted by kind per task up to its
				// Acquire's return: renewals and refreshes that start
				// meanwhile are not part of it.
				byKind := map[string]int{}
				calls := 0
				for i, c := range counters {
					k := c.snapshot()
					for kind, v := range k {
						byKind[kind] += v
					}
					if k["take"] < 1 {
						t.Errorf("task-%d acquired without a take: %v", i, k)
					}
					calls += c.count("list", "get", "marker", "create-marker", "create", "take")
				}
				t.Logf("%d providers: %d acquisition calls, %.1f per task %v; %d HTTP requests in all (renewals and retries included)",
					n, calls, float64(calls)/float64(n), byKind, repo.Requests()-before)
				if byKind["take"] < n {
					t.Errorf("%d takes for %d tasks", byKind["take"], n)
				}
				// The anchor's strategy (IDs in order, GET then PUT) needs
				// about n/2 GETs per task; spreading the start keeps it small.
				if perTask := float64(calls) / float64(n); tc.bootstrap && perTask > 10 {
					t.Errorf("%.1f calls per task to acquire in a storm of %d: %v", perTask, n, byKind)
				}
			})
		})
	}
}

func TestWaiterTakesReleasedIDAtOnce(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		repo := newRepo(t, srv, "")
		holders := make([]*nodeid.Provider, 3)
		for i := range holders {
			holders[i] = newProvider(t, repo, roomyConfig(t, fmt.Sprintf("holder-%d", i), 3, nil))
			acquire(t, holders[i], 10*time.Second)
		}
		wrepo := newCountingRepo(repo)
		waiter := newProvider(t, wrepo, roomyConfig(t, "waiter", 3, nil))
		type result struct {
			inst nodeid.NodeInstance
			err  error
			at   time.Time
		}
		done := make(chan result, 1)
		go func() {
			inst, err := waiter.Acquire(context.Background())
			done <- result{inst, err, time.Now()}
		}()
		select {
		case r := <-done:
			t.Fatalf("waiter acquired %v (err %v) while every ID was held", r.inst, r.err)
		case <-time.After(700 * time.Millisecond):
		}

		released := holders[1].Instance()
		closedAt, lists := time.Now(), wrepo.count("list")
		if err := holders[1].Close(context.Background()); err != nil {
			t.Fatalf("close: %v", err)
		}
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		want := nodeid.NodeInstance{ID: released.ID, Version: released.Version + 1}
		if r.inst != want {
			t.Fatalf("waiter got %v, want %v", r.inst, want)
		}
		// "At once": taken as a release, not after an expiry, with the
		// waiter's first conditional PUT, at its next poll. Counted in
		// listings, not time: a poll in flight, the next one, and the
		// survey of versions before a take (an expiry would take more than
		// L / poll interval = 80).
		t.Logf("waiter took it %v after the release", r.at.Sub(closedAt).Round(time.Millisecond))
		if n := wrepo.count("list") - lists; n > 3 {
			t.Errorf("waiter listed %d times after the release before taking it, want at most 3", n)
		}
		if !waiter.PreviousGracefullyShutdown() {
			t.Error("PreviousGracefullyShutdown = false after a release")
		}
		if s := waiter.Stats(); s.AcquireAttempts != 1 {
			t.Errorf("waiter stats %+v, want one acquisition attempt", s)
		}
		if holders[1].Valid() || !errors.Is(holders[1].Err(), nodeid.ErrClosed) {
			t.Errorf("closed holder: Valid=%v Err=%v", holders[1].Valid(), holders[1].Err())
		}
	})
}

func TestCloseReleasesKeepingTheVersion(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		repo := newRepo(t, srv, "")
		p := newProvider(t, repo, roomyConfig(t, "t1", 1, nil))
		inst := acquire(t, p, 5*time.Second)
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		rec, err := repo.Get(context.Background(), inst.ID)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Size%512 != 0 || rec.Lease.Held() || rec.Lease.Legacy || rec.Lease.Writer != "t1" || !rec.Lease.Acquirable || rec.Lease.Instance.Version != inst.Version {
			t.Fatalf("after release: size %d lease %+v, want a released acquirable lease of version %d", rec.Size, rec.Lease, inst.Version)
		}
		select {
		case <-p.Done():
		default:
			t.Fatal("Done not closed after Close")
		}
	})
}

func TestRenewalKeepsTheLeaseBeyondItsDuration(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		repo := newRepo(t, srv, "")
		cfg := doubled(fastConfig(t, "t1", 1, nil))
		p := newProvider(t, repo, cfg)
		inst := acquire(t, p, 5*time.Second)
		first, err := repo.Get(context.Background(), inst.ID)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(cfg.LeaseDuration * 3 / 2)
		if !p.Valid() {
			t.Fatalf("lease not valid after 1.5 lease durations of renewals: %v", p.Err())
		}
		// Valid at 1.5 L needs a renewal sent after 1.5 L - (L - m); how
		// many more is up to the scheduler.
		if s := p.Stats(); s.Renewals < 1 {
			t.Errorf("%d renewals in 1.5 lease durations", s.Renewals)
		}
		now, err := repo.Get(context.Background(), inst.ID)
		if err != nil {
			t.Fatal(err)
		}
		if now.ETag == first.ETag || now.Lease.Nonce == first.Lease.Nonce {
			t.Error("renewals did not change the object")
		}
		if now.Lease.TaskID != "t1" || now.Lease.Instance != inst || now.Lease.Duration != cfg.LeaseDuration {
			t.Errorf("renewed lease %+v", now.Lease)
		}
		// A candidate sees a live lease and cannot take it.
		c := newProvider(t, repo, withAcquireTimeout(fastConfig(t, "candidate", 1, nil), 2500*time.Millisecond))
		if _, err := c.Acquire(context.Background()); !errors.Is(err, nodeid.ErrAcquireTimeout) {
			t.Fatalf("candidate: %v, want ErrAcquireTimeout", err)
		}
	})
}

func withAcquireTimeout(c nodeid.Config, d time.Duration) nodeid.Config {
	c.AcquireTimeout = d
	return c
}

func TestOutsideOverwriteLosesWithinOneRenewInterval(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		repo := newRepo(t, srv, "")
		lost := newLossRecorder()
		cfg := fastConfig(t, "t1", 3, lost)
		p := newProvider(t, repo, cfg)
		inst := acquire(t, p, 5*time.Second)

		body, meta := foreignLease("abc", inst.ID, int64(inst.Version)+1)
		putRaw(t, srv, nodeid.LeaseKey(testPrefix, inst.ID), body, meta)
		// A renewal in flight during the put may still have succeeded
		// before it landed; none can after.
		renewals := p.Stats().Renewals
		select {
		case err := <-lost.ch:
			if !errors.Is(err, nodeid.ErrLeaseLost) || !strings.Contains(err.Error(), `task "abc"`) {
				t.Errorf("loss reason: %v", err)
			}
			if !errors.Is(err, nodeid.ErrPreconditionFailed) {
				t.Errorf("loss not caused by a 412: %v", err)
			}
			// The first renewal after the overwrite found it: no renewal
			// succeeded since, and it was not the deadline that stopped it.
			if s := p.Stats(); s.Renewals != renewals || s.SelfFences != 0 {
				t.Errorf("stats %+v: renewals went on after the overwrite (%d before)", s, renewals)
			}
		case <-time.After(cfg.LeaseDuration + 3*time.Second):
			t.Fatal("overwritten holder did not lose its lease")
		}
		if p.Valid() {
			t.Error("Valid after loss")
		}
	})
}

func TestDeletedLeaseObjectIsALoss(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		repo := newRepo(t, srv, "")
		lost := newLossRecorder()
		p := newProvider(t, repo, fastConfig(t, "t1", 1, lost))
		inst := acquire(t, p, 5*time.Second)
		deleteRaw(t, srv, nodeid.LeaseKey(testPrefix, inst.ID))
		select {
		case err := <-lost.ch:
			if !strings.Contains(err.Error(), "deleted") {
				t.Errorf("loss reason %v, want deleted", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("holder of a deleted lease object did not lose it")
		}
	})
}

// writeDeadLease makes node id look held by a task that crashed just now.
func writeDeadLease(t *testing.T, repo *nodeid.S3Repository, id int, version nodeid.Version) time.Time {
	t.Helper()
	ctx := context.Background()
	if err := nodeid.Initialize(ctx, repo, id+1, "setup", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	rec, err := repo.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	l := nodeid.Lease{TaskID: "dead-task", Instance: nodeid.NodeInstance{ID: id, Version: version},
		Expires: time.Now().Add(2 * time.Second), Duration: 2 * time.Second, Nonce: "n1", Acquirable: true}
	written := time.Now()
	if _, err := repo.Write(ctx, l, rec.ETag); err != nil {
		t.Fatal(err)
	}
	return written
}

func TestExpiredLeaseIsTakenOverWithTheNextVersion(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		repo := newRepo(t, srv, "")
		written := writeDeadLease(t, repo, 0, 4)
		p := newProvider(t, repo, fastConfig(t, "t2", 1, nil))
		inst := acquire(t, p, 10*time.Second)
		if took := time.Since(written); took < 2*time.Second {
			t.Errorf("took over %v after the holder's last write, before its 2s lease could expire", took)
		}
		if inst != (nodeid.NodeInstance{ID: 0, Version: 5}) {
			t.Errorf("got %v, want node 0 v5", inst)
		}
		if p.PreviousGracefullyShutdown() {
			t.Error("PreviousGracefullyShutdown after taking over an expired lease")
		}
	})
}

func TestCorruptLeaseObjectIsSkipped(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		repo := newRepo(t, srv, "")
		if err := nodeid.Initialize(context.Background(), repo, 2, "setup", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		putRaw(t, srv, nodeid.LeaseKey(testPrefix, 0), `{"taskId": "x", "nodeInst`, map[string]string{"version": "3"})
		// Every task starts at its own offset; try several so some start at 0.
		for i := 0; i < 4; i++ {
			p := newProvider(t, repo, fastConfig(t, fmt.Sprintf("t%d", i), 2, nil))
			inst := acquire(t, p, 5*time.Second)
			if inst.ID != 1 {
				t.Fatalf("t%d got %v, want node 1 (node 0 is corrupt)", i, inst)
			}
			if err := p.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := repo.Get(context.Background(), 0); !errors.Is(err, nodeid.ErrCorruptLease) {
			t.Fatalf("corrupt object was changed: %v", err)
		}
		// With only the corrupt ID allowed, acquisition times out cleanly.
		cfg := withAcquireTimeout(fastConfig(t, "only-zero", 2, nil), 500*time.Millisecond)
		cfg.AllowedIDs = []int{0}
		p := newProvider(t, repo, cfg)
		if _, err := p.Acquire(context.Background()); !errors.Is(err, nodeid.ErrAcquireTimeout) {
			t.Fatalf("got %v, want ErrAcquireTimeout", err)
		}
	})
}

func TestAllowedIDsAreRespected(t *testing.T) {
	srv := s3test.NewFake(t)
	repo := newRepo(t, srv, "")
	for i, want := range []int{4, 2} {
		cfg := roomyConfig(t, fmt.Sprintf("even-%d", i), 6, nil)
		cfg.AllowedIDs = []int{2, 4}
		if i == 0 {
			cfg.AllowedIDs = []int{4}
		}
		inst := acquire(t, newProvider(t, repo, cfg), 5*time.Second)
		if inst.ID != want {
			t.Fatalf("got %v, want node %d", inst, want)
		}
	}
}

func TestWallClockOneHourAheadCannotTakeALiveLease(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		repo := newRepo(t, srv, "")
		holder := newProvider(t, repo, roomyConfig(t, "holder", 1, nil))
		acquire(t, holder, 5*time.Second)
		for _, skew := range []time.Duration{time.Hour, -time.Hour} {
			cfg := withAcquireTimeout(fastConfig(t, fmt.Sprintf("skewed%v", skew), 1, nil), 3*time.Second)
			cfg.Clock = clock.WithOffset(clock.Real(), skew)
			c := newProvider(t, repo, cfg)
			if inst, err := c.Acquire(context.Background()); !errors.Is(err, nodeid.ErrAcquireTimeout) {
				t.Fatalf("task with clock %v: got %v, %v; want ErrAcquireTimeout", skew, inst, err)
			}
		}
		if !holder.Valid() {
			t.Fatal("holder lost its lease")
		}
	})
}

func TestScaleDownFencesTheHolderOfARemovedID(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		repo := newRepo(t, srv, "")
		lost := newLossRecorder()
		var victim *nodeid.Provider
		for i := 0; i < 3; i++ {
			// Roomy: only the removed ID's holder may lose its lease,
			// also on a stalled machine.
			p := newProvider(t, repo, roomyConfig(t, fmt.Sprintf("t%d", i), 3, lost))
			if acquire(t, p, 5*time.Second).ID == 2 {
				victim = p
			}
		}
		if err := nodeid.Scale(context.Background(), repo, 2, "admin", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-lost.ch:
			if victim.Valid() || !strings.Contains(err.Error(), "unusable") {
				t.Fatalf("loss %v (victim valid: %v)", err, victim.Valid())
			}
		case <-time.After(5 * time.Second):
			t.Fatal("holder of the removed ID was not fenced")
		}
		time.Sleep(time.Second)
		if n := lost.count(); n != 1 {
			t.Fatalf("%d losses, want only the removed ID's holder", n)
		}
		rec, err := repo.Get(context.Background(), 2)
		if err != nil || rec.Lease.Acquirable {
			t.Fatalf("node 2 after scale-down: %+v, %v", rec.Lease, err)
		}
		// No new task may take the removed ID.
		c := newProvider(t, repo, withAcquireTimeout(fastConfig(t, "late", 3, nil), 3500*time.Millisecond))
		if inst, err := c.Acquire(context.Background()); !errors.Is(err, nodeid.ErrAcquireTimeout) {
			t.Fatalf("late task got %v, %v after scale-down", inst, err)
		}
		// Scaling up again makes it acquirable, keeping its version.
		if err := nodeid.Scale(context.Background(), repo, 3, "admin", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		c2 := newProvider(t, repo, fastConfig(t, "after-scale-up", 3, nil))
		inst := acquire(t, c2, 10*time.Second)
		if inst.ID != 2 || inst.Version != 2 {
			t.Fatalf("after scale-up got %v, want node 2 v2", inst)
		}
	})
}

func TestInitializeIsIdempotentUnderConcurrency(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		repo := newRepo(t, srv, "")
		var wg sync.WaitGroup
		errs := make(chan error, 20)
		for i := 0; i < 20; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- nodeid.Initialize(context.Background(), repo, 5, fmt.Sprintf("t%d", i), 2*time.Second)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		listing, err := repo.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(listing.Slots) != 5 {
			t.Fatalf("%d lease objects, want 5", len(listing.Slots))
		}
		for _, s := range listing.Slots {
			rec, err := repo.Get(context.Background(), s.ID)
			if err != nil || rec.Lease.Held() || rec.Lease.Instance.Version != 0 || !rec.Lease.Acquirable {
				t.Errorf("node %d: %+v %v", s.ID, rec.Lease, err)
			}
		}
	})
}

func TestDeletedObjectIsRecreatedWithTheKnownVersion(t *testing.T) {
	srv := s3test.NewFake(t)
	repo := newRepo(t, srv, "")
	ctx := context.Background()
	if err := nodeid.Initialize(ctx, repo, 2, "setup", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	rec, _ := repo.Get(ctx, 0)
	peer := nodeid.Lease{TaskID: "peer", Instance: nodeid.NodeInstance{ID: 0, Version: 3}, Duration: time.Second,
		Nonce: "n", KnownVersions: nodeid.VersionMappings{0: 3, 1: 7}, Acquirable: true}
	if _, err := repo.Write(ctx, peer, rec.ETag); err != nil {
		t.Fatal(err)
	}
	deleteRaw(t, srv, nodeid.LeaseKey(testPrefix, 1))
	if err := nodeid.Initialize(ctx, repo, 2, "repairer", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	got, err := repo.Get(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got.Lease.Instance.Version != 7 || !got.Lease.Held() {
		t.Fatalf("recreated node 1: %+v, want a held lease of version 7 that candidates must let expire", got.Lease)
	}
}

func TestProviderAfterCloseRefusesToAcquire(t *testing.T) {
	srv := s3test.NewFake(t)
	p := newProvider(t, newRepo(t, srv, ""), fastConfig(t, "t", 1, nil))
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Acquire(context.Background()); !errors.Is(err, nodeid.ErrClosed) {
		t.Fatalf("got %v, want ErrClosed", err)
	}
}

func TestCloseWhileAcquiringStopsTheWait(t *testing.T) {
	srv := s3test.NewFake(t)
	repo := newRepo(t, srv, "")
	acquire(t, newProvider(t, repo, roomyConfig(t, "holder", 1, nil)), 5*time.Second)
	cfg, book := withLogBook(t, roomyConfig(t, "waiter", 1, nil))
	w := newProvider(t, repo, cfg)
	errc := make(chan error, 1)
	go func() { _, err := w.Acquire(context.Background()); errc <- err }()
	waitFor(t, 10*time.Second, "the waiter to wait", func() bool { return book.count("no node id free, waiting") > 0 })
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, nodeid.ErrClosed) {
			t.Fatalf("got %v, want ErrClosed", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Acquire did not return after Close")
	}
}

// After an ungraceful takeover the new holder is ready only once every live
// peer's lease lists its new version.
func TestReadinessWaitsForPeersToKnowTheNewVersion(t *testing.T) {
	srv := s3test.NewFake(t)
	repo := newRepo(t, srv, "")
	// Doubled timings: the peer creates the cluster marker with its lease
	// duration, and the newcomer may not use a longer one.
	peerCfg := doubled(fastConfig(t, "peer", 2, nil))
	peerCfg.AllowedIDs = []int{0}
	peerCfg.MappingsRefreshInterval = 300 * time.Millisecond
	peer := newProvider(t, repo, peerCfg)
	acquire(t, peer, 5*time.Second)
	writeDeadLease(t, repo, 1, 3)

	cfg := doubled(fastConfig(t, "newcomer", 2, nil))
	cfg.AllowedIDs = []int{1}
	cfg.ReadinessTimeout = 30 * time.Second
	newcomer := newProvider(t, repo, cfg)
	inst := acquire(t, newcomer, 10*time.Second)
	if inst.Version != 4 || newcomer.PreviousGracefullyShutdown() {
		t.Fatalf("got %v graceful=%v, want an ungraceful takeover to v4", inst, newcomer.PreviousGracefullyShutdown())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := newcomer.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	rec, err := repo.Get(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Lease.KnownVersions[1] != 4 {
		t.Fatalf("ready although the peer's lease knows node 1 as v%d", rec.Lease.KnownVersions[1])
	}
	if peer.KnownVersions()[1] != 4 {
		t.Errorf("peer's mappings %v", peer.KnownVersions())
	}
}

func TestReadinessFailsOpenAfterItsTimeout(t *testing.T) {
	srv := s3test.NewFake(t)
	repo := newRepo(t, srv, "")
	// A peer that never refreshes its mappings within the test.
	peerCfg := doubled(fastConfig(t, "peer", 2, nil))
	peerCfg.AllowedIDs = []int{0}
	peerCfg.MappingsRefreshInterval = time.Hour
	acquire(t, newProvider(t, repo, peerCfg), 5*time.Second)
	writeDeadLease(t, repo, 1, 3)

	cfg := doubled(fastConfig(t, "newcomer", 2, nil))
	cfg.AllowedIDs = []int{1}
	cfg.ReadinessTimeout = 1500 * time.Millisecond
	clk := clock.Real()
	cfg.Clock = clk
	newcomer := newProvider(t, repo, cfg)
	// The timeout counts from the take's send, which is after this.
	start := clk.Now()
	acquire(t, newcomer, 10*time.Second)
	if newcomer.Ready() && clk.Now().Sub(start) < cfg.ReadinessTimeout {
		t.Fatal("ready at once after an ungraceful takeover")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := newcomer.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if waited := clk.Now().Sub(start); waited < cfg.ReadinessTimeout {
		t.Errorf("ready after %v, before the readiness timeout %v", waited, cfg.ReadinessTimeout)
	}
}

func TestEndpointFromTheStandardEnvironment(t *testing.T) {
	srv := s3test.NewFake(t)
	t.Setenv("AWS_ENDPOINT_URL_S3", srv.URL)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	client, err := nodeid.NewS3Client(context.Background(), nodeid.S3Config{PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	repo, err := nodeid.NewS3Repository(client, srv.Bucket, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := nodeid.Initialize(context.Background(), repo, 2, "t", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if l, err := repo.List(context.Background()); err != nil || len(l.Slots) != 2 {
		t.Fatalf("listing through AWS_ENDPOINT_URL_S3: %+v %v", l, err)
	}
}

// The anchor's strategy, kept as a benchmark baseline, must be as correct.
func TestSequentialStrategyGetsDistinctIDs(t *testing.T) {
	srv := s3test.NewFake(t)
	repo := newRepo(t, srv, "")
	if err := nodeid.Initialize(context.Background(), repo, 10, "bootstrap", roomyConfig(t, "", 1, nil).LeaseDuration); err != nil {
		t.Fatal(err)
	}
	before := repo.Requests()
	results := make([]<-chan acquireResult, 10)
	for i := range results {
		cfg := roomyConfig(t, fmt.Sprintf("seq-%d", i), 10, nil)
		cfg.Strategy = nodeid.StrategySequential
		results[i] = acquireAsync(newProvider(t, repo, cfg))
	}
	seen := map[int]bool{}
	for i, ch := range results {
		r := <-ch
		if r.err != nil {
			t.Fatalf("seq-%d: %v", i, r.err)
		}
		if seen[r.inst.ID] {
			t.Fatalf("node %d taken twice", r.inst.ID)
		}
		seen[r.inst.ID] = true
	}
	t.Logf("sequential strategy, 10 tasks: %d requests", repo.Requests()-before)
}
