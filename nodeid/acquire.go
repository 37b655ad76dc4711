package nodeid

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nodeid/nodeid/clock"
)

// Acquire takes a node ID and starts renewing it. It waits, listing the
// leases again every PollInterval (jittered), while every allowed ID is held,
// until AcquireTimeout (ErrAcquireTimeout), ctx ends, or Close. Errors that
// waiting cannot cure (access denied, no such bucket) return at once.
func (p *Provider) Acquire(ctx context.Context) (NodeInstance, error) {
	if err := p.beginAcquire(); err != nil {
		return NodeInstance{}, err
	}
	start := p.cfg.Clock.Now()
	ctx, cancel := p.cancelOnClose(ctx)
	defer cancel()
	var acquireDeadline time.Time
	if p.cfg.AcquireTimeout > 0 {
		acquireDeadline = start.Add(p.cfg.AcquireTimeout)
	}

	var waitingSince, progressLogged time.Time
	relists := 0
	hint := &spareHint{}
	if h, ok := p.repo.(ReleaseHintRepository); ok && p.cfg.Strategy != StrategySequential && p.cfg.SpareListInterval > p.cfg.PollInterval {
		hint.h = h
	}
	wait := p.cfg.Clock.NewTimer(time.Hour)
	wait.Stop()
	defer wait.Stop()
	for pass := 0; ; pass++ {
		if hint.skipListing(ctx, p) {
			// Nothing released since our listing: poll the hint again.
			delay, err := p.pollDelay(pass, acquireDeadline)
			if err == nil {
				err = p.sleep(ctx, wait, delay)
			}
			if err != nil {
				return p.failAcquire(err)
			}
			continue
		}
		hint.beforeListing(ctx, p)
		hint.armed = false
		res, err := p.tryOnce(ctx)
		switch {
		case IsPermanent(err):
			return p.failAcquire(err)
		case res.taken:
			if p.ctx.Err() != nil {
				// Closed during the take: the renew loop releases what it
				// took, and Close waits for that.
				return NodeInstance{}, ErrClosed
			}
			return p.reportAcquired(res.inst, start), nil
		case err != nil:
			p.log.Warn("reading leases failed, retrying", "err", err)
		case res.stale && relists < p.clusterSize():
			relists++ // others are taking IDs right now: look again at once
			continue
		default:
			relists = 0
			hint.armed = true
			now := p.cfg.Clock.Now()
			switch {
			case waitingSince.IsZero():
				waitingSince, progressLogged = now, now
				p.log.Info("no node id free, waiting", "cluster_size", p.clusterSize(),
					"held_ids", res.held, "poll_interval_seconds", p.cfg.PollInterval.Seconds())
			case now.Sub(progressLogged) >= waitProgressEvery:
				// A spare may wait for days: a line now and then shows it
				// is alive and still looking, not stuck.
				progressLogged = now
				p.log.Info("still waiting for a node id", "cluster_size", p.clusterSize(),
					"held_ids", res.held, "waited_seconds", now.Sub(waitingSince).Round(time.Second).Seconds())
			}
		}
		delay, err := p.pollDelay(pass, acquireDeadline)
		if err == nil {
			err = p.sleep(ctx, wait, delay)
		}
		if err != nil {
			return p.failAcquire(err)
		}
	}
}

// waitProgressEvery is how often a waiting task logs that it still waits.
const waitProgressEvery = time.Minute

// beginAcquire moves an idle provider to acquiring.
func (p *Provider) beginAcquire() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch p.state {
	case stateIdle:
		p.state = stateAcquiring
		return nil
	case stateClosed:
		return ErrClosed
	}
	return errors.New("nodeid: Acquire called twice on one provider")
}

// cancelOnClose returns ctx, cancelled also by Close.
func (p *Provider) cancelOnClose(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(p.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

// passResult is what one pass over the leases found.
type passResult struct {
	inst  NodeInstance
	taken bool // inst is held now
	stale bool // others took IDs since our listing: list again at once
	held  int  // allowed IDs the pass found held (for the waiting lines)
}

// tryOnce is one pass of the configured strategy.
func (p *Provider) tryOnce(ctx context.Context) (passResult, error) {
	if p.cfg.Strategy == StrategySequential {
		return p.trySequential(ctx)
	}
	return p.trySpread(ctx)
}

// reportAcquired reports the acquisition of inst, which began at start.
func (p *Provider) reportAcquired(inst NodeInstance, start time.Time) NodeInstance {
	took := p.cfg.Clock.Now().Sub(start)
	deadline, _ := p.Deadline()
	graceful := p.PreviousGracefullyShutdown()
	p.tlog.Info("acquired node id", "previous_graceful", graceful, "took_seconds", logSeconds(took))
	p.emit(Event{Kind: EventAcquired, Instance: inst, Deadline: deadline, Latency: took, Graceful: graceful})
	return inst
}

// pollDelay is the pause before the next pass, or ErrAcquireTimeout once
// the acquire timeout has passed. Poll at least once per PollInterval, so a
// released ID is taken within it; the randomness keeps waiting tasks apart.
func (p *Provider) pollDelay(pass int, acquireDeadline time.Time) (time.Duration, error) {
	delay := p.between(p.cfg.PollInterval/2, p.cfg.PollInterval)
	if p.cfg.Strategy == StrategySequential {
		delay = min(time.Second<<min(pass, 5), 30*time.Second)
	}
	if !acquireDeadline.IsZero() {
		left := acquireDeadline.Sub(p.cfg.Clock.Now())
		if left <= 0 {
			return 0, fmt.Errorf("%w (%v)", ErrAcquireTimeout, p.cfg.AcquireTimeout)
		}
		delay = min(delay, left)
	}
	return delay, nil
}

// sleep waits delay on t; it returns ErrClosed after Close, or ctx's error
// when ctx ends first.
func (p *Provider) sleep(ctx context.Context, t clock.Timer, delay time.Duration) error {
	t.Reset(delay)
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		if p.ctx.Err() != nil {
			return ErrClosed
		}
		return ctx.Err()
	}
}

func (p *Provider) failAcquire(err error) (NodeInstance, error) {
	p.mu.Lock()
	if p.state == stateAcquiring {
		p.state = stateIdle
		if errors.Is(err, ErrClosed) {
			p.state = stateClosed
		}
	}
	p.mu.Unlock()
	return NodeInstance{}, err
}

// trySpread is one pass of the default strategy: one List, then the
// candidates it shows, starting at a task-specific ID.
func (p *Provider) trySpread(ctx context.Context) (passResult, error) {
	sent := p.cfg.Clock.Now()
	listing, err := p.list(ctx)
	rtt := p.cfg.Clock.Now().Sub(sent)
	if err == nil {
		listing, err = p.awaitBootstrap(ctx, listing, rtt)
	}
	var created []Record
	if err == nil && (!listing.MarkerSeen || len(missingIDs(listing, p.clusterSize())) > 0) {
		// First start of the cluster, a scale-up, or a deleted object.
		ictx, cancel := context.WithTimeout(ctx, time.Duration(p.clusterSize()+4)*p.cfg.RequestTimeout)
		var b bootstrap
		// While others create faster than what is left, read the marker a
		// few times (a cheap GET) rather than race them (a create and a LIST
		// per lost race).
		b, err = initializeFrom(ictx, p.repo, listing, p.clusterSize(), p.cfg.TaskID, p.cfg.LeaseDuration, p.nonce, func(ctx context.Context) bool {
			return p.pollMarker(ctx, rtt, 3)
		})
		cancel()
		// A marker we created ourselves is read back when needed: only the
		// server knows its Last-Modified, which the freshness proof needs.
		listing, created = b.listing, b.created
		if err == nil && len(created) == 0 && len(missingIDs(listing, p.clusterSize())) > 0 {
			// Others created the objects: the listing we hold may lack them.
			listing, err = p.list(ctx)
		}
	}
	if err != nil {
		return passResult{}, err
	}
	arrived := p.cfg.Clock.Now()
	for _, s := range listing.Slots {
		if s.LastModified.IsZero() {
			continue // created by us just now: only its ETag is known
		}
		p.seen.see(s.ID, s.ETag, arrived)
	}
	if err := p.checkClusterLease(ctx); err != nil {
		return passResult{}, err
	}
	return p.tryListing(ctx, listing, created), nil
}

// awaitBootstrap waits for the cluster marker while the listing shows a
// cluster being created by others: objects missing and no marker. Going on
// from such a listing would read every object to judge the cluster fresh
// (surveyLeases), one GET per object, and race the creators for the last
// objects, while they need only a few more round trips. It reads the marker,
// which the acquisition needs anyway, at most ClusterSize times (pollMarker;
// about as long as one task alone would take to create every object), then
// lists again. It only delays: what follows is decided from the new listing
// as before.
func (p *Provider) awaitBootstrap(ctx context.Context, listing Listing, rtt time.Duration) (Listing, error) {
	if listing.MarkerSeen || len(listing.Slots) == 0 || len(missingIDs(listing, p.clusterSize())) == 0 {
		return listing, nil
	}
	p.pollMarker(ctx, rtt, p.clusterSize())
	if err := ctx.Err(); err != nil {
		return listing, err
	}
	return p.list(ctx)
}

// pollMarker reads the cluster marker up to n times, each after a pause of
// twice the last request's round trip (shorter pauses mostly add 404s), and
// reports whether it found it.
func (p *Provider) pollMarker(ctx context.Context, rtt time.Duration, n int) bool {
	pause := p.cfg.Clock.NewTimer(time.Hour)
	defer pause.Stop()
	for range n {
		pause.Reset(2 * rtt)
		select {
		case <-pause.C():
		case <-ctx.Done():
			return false
		}
		sent := p.cfg.Clock.Now()
		gctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
		m, err := p.repo.Marker(gctx)
		cancel()
		rtt = p.cfg.Clock.Now().Sub(sent)
		if err == nil {
			p.marker = &m
			return true
		}
		if !errors.Is(err, ErrNotFound) {
			return false
		}
	}
	return false
}

// list and get bound one request made while acquiring: the repository may
// have no timeout of its own, and a lost answer must not stall the task.
// A listing may span pages, so it gets twice as long.
func (p *Provider) list(ctx context.Context) (Listing, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*p.cfg.RequestTimeout)
	defer cancel()
	return p.repo.List(ctx)
}

func (p *Provider) get(ctx context.Context, id int) (Record, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	return p.repo.Get(ctx, id)
}

// logSeconds is d as a number of seconds to the millisecond, for log fields
// named *_seconds (1.519, not 1.5190000000000001).
func logSeconds(d time.Duration) float64 {
	return float64(d.Round(time.Millisecond).Milliseconds()) / 1000
}
