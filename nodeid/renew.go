package nodeid

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"
)

// tenure is the state a holder starts from: what take wrote, or what a
// hand-off carried to Adopt.
type tenure struct {
	inst     NodeInstance
	etag     string
	deadline time.Time // self-fence deadline
	acquired time.Time
	graceful bool
	known    VersionMappings
	pending  map[string]time.Time // writes whose answer was lost (a hand-off's)
	// published: the tenure object exists (take wrote it); else the
	// refresh loop writes it.
	published bool
}

// Why hold did not start a tenure: the provider was no longer in the state
// it expected, or an adopted lease's first renewal failed (see Err).
var (
	errNotFrom      = errors.New("provider state changed")
	errFirstRenewal = errors.New("first renewal failed")
)

// hold makes the provider the holder of t, if it is still in state from,
// and starts the loops that keep the lease: the watchdog first, which guards
// the first renewal too, then the renew loop and the refresh loop. With
// renewNow (an adoption) the first renewal is sent before they start; if it
// fails, they do not. Else the first renewal is due after RenewInterval.
func (p *Provider) hold(from providerState, t tenure, renewNow bool) error {
	p.mu.Lock()
	if p.state != from {
		p.mu.Unlock()
		return errNotFrom
	}
	p.state = stateHolding
	p.instance = t.inst
	p.etag = t.etag
	p.deadline = t.deadline
	p.acquired = t.acquired
	p.graceful = t.graceful
	p.known = t.known
	p.renewFails = 0
	maps.Copy(p.pending, t.pending)
	p.ready = t.graceful || p.cfg.ReadinessTimeout == 0
	p.published = t.published
	p.tlog = p.log.With("node_id", t.inst.ID, "version", int64(t.inst.Version))
	p.mu.Unlock()

	// Count all three loops before starting any: a Close waiting on loops
	// while the watchdog alone runs (and exits on a passed deadline) must
	// not see the count go 0 -> 1 again under its Wait.
	p.loops.Add(3)
	go p.runLoop(p.watchdog)
	first := p.cfg.RenewInterval
	if renewNow {
		next, ok := p.renew()
		if !ok {
			p.loops.Add(-2) // the two loops that will not start
			return errFirstRenewal
		}
		first = next
	}
	go p.runLoop(func() { p.renewLoop(first) })
	go p.runLoop(p.refreshLoop)
	return nil
}

// runLoop runs f, a loop counted in loops, which Close waits for.
func (p *Provider) runLoop(f func()) {
	defer p.loops.Done()
	f()
}

// renewLoop renews every RenewInterval, retries failed renewals sooner, and
// releases the lease on Close. It is the only writer of the lease object
// while the lease is held.
func (p *Provider) renewLoop(first time.Duration) {
	t := p.cfg.Clock.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			p.release()
			return
		case <-p.done:
			return
		case <-t.C():
		}
		next, ok := p.renew()
		if !ok {
			return
		}
		t.Reset(next)
	}
}

// renew sends one renewal and returns the delay until the next one.
func (p *Provider) renew() (time.Duration, bool) {
	p.mu.Lock()
	if p.state != stateHolding {
		p.mu.Unlock()
		return 0, false
	}
	sent := p.cfg.Clock.Now()
	lease := p.newLease(p.instance, p.known.Clone(), sent)
	etag, deadline := p.etag, p.deadline
	// Recorded before sending: a duplicated request can land and have its
	// twin answered 412, and reconcile must then recognise our own write.
	p.pending[lease.Nonce] = sent
	p.mu.Unlock()

	if !p.mayRenew(deadline, sent) {
		// Woken after the deadline (a paused process, a starved goroutine):
		// never send a renewal for a lease we no longer hold.
		p.stats.selfFences.Add(1)
		p.lose(reasonSelfFence, nil)
		return 0, false
	}
	ctx, cancel := p.boundedContext(deadline, sent)
	defer cancel()
	p.tlog.Debug("renewal sent", "left_seconds", max(deadline.Sub(sent), 0).Seconds())
	newETag, err := p.repo.Write(ctx, lease, etag)
	if err == nil {
		return p.renewed(sent, newETag)
	}
	p.stats.renewalFailures.Add(1)
	p.emit(Event{Kind: EventRenewalFailed, Instance: lease.Instance, Latency: p.cfg.Clock.Now().Sub(sent), Err: err})
	p.mu.Lock()
	holding := p.state == stateHolding
	p.renewFails++
	attempt, left := p.renewFails, max(p.deadline.Sub(p.cfg.Clock.Now()), 0)
	p.mu.Unlock()
	switch {
	case errors.Is(err, ErrNotFound):
		p.loseRestoring("lease object deleted", err, lease.Instance, "", deadline)
		return 0, false
	case isLostRace(err):
		return p.reconcile(err)
	default:
		// No answer: the write may have landed. Its nonce stays pending,
		// so a later 412 against our own write is not taken for a loss.
		if !holding {
			return 0, false
		}
		// One line per failed attempt, with the time left: during an
		// outage it is the only warning before the self-fence. Only here:
		// on the paths that lose the lease the fence comes before any log
		// line (loseThen).
		p.tlog.Warn("renewal failed", "left_seconds", left.Seconds(), "attempt", attempt, "err", err.Error())
		return p.retryDelay(), true
	}
}

// reconcile reads the object after a 412 or 409 to tell our own landed write
// (answer lost, an SDK retry, a duplicated request) from someone else's.
func (p *Provider) reconcile(cause error) (time.Duration, bool) {
	now := p.cfg.Clock.Now()
	p.mu.Lock()
	inst, etag, deadline := p.instance, p.etag, p.deadline
	p.mu.Unlock()

	ctx, cancel := p.boundedContext(deadline, now)
	defer cancel()
	rec, err := p.repo.Get(ctx, inst.ID)
	switch {
	case errors.Is(err, ErrNotFound):
		p.loseRestoring("lease object deleted", cause, inst, "", deadline)
		return 0, false
	case errors.Is(err, ErrCorruptLease) && !restorableOver(err, inst):
		p.lose("lease object overwritten with a corrupt object that records a scale-down or a later version", err)
		return 0, false
	case errors.Is(err, ErrCorruptLease):
		// The object no longer records our version, and no peer need know
		// it yet: put it back over the corrupt object (If-Match on its
		// ETag), as after a delete, or a forced release would repeat it.
		p.loseRestoring("lease object overwritten with a corrupt object", err, inst, rec.ETag, deadline)
		return 0, false
	case err != nil:
		// Cannot tell yet. A rejected renewal is most likely someone
		// else's write, so the holder does not wait for its deadline:
		// unreadable for a request timeout, it stops.
		p.mu.Lock()
		if p.unreadSince.IsZero() {
			p.unreadSince = now
		}
		since := p.unreadSince
		p.mu.Unlock()
		if p.cfg.Clock.Now().Sub(since) >= p.cfg.RequestTimeout {
			p.lose("renewal rejected and the lease object cannot be read", errors.Join(cause, err))
			return 0, false
		}
		return p.retryDelay(), true
	}

	p.mu.Lock()
	p.unreadSince = time.Time{}
	sent, ours := p.pending[rec.Lease.Nonce]
	p.mu.Unlock()
	l := rec.Lease
	switch {
	case ours && l.TaskID == p.cfg.TaskID && l.Instance == inst && l.Acquirable:
		p.tlog.Info("renewal had landed although its answer was lost")
		return p.renewed(sent, rec.ETag)
	case errors.Is(cause, ErrConflict) && rec.ETag == etag:
		return p.retryDelay(), true // nothing landed: try again
	case l.Instance.ID == inst.ID && l.Instance.Version < inst.Version && l.Acquirable:
		// Deleted and recreated below our version (by a task whose view
		// was stale, or from outside): only we may know ours. Put it
		// back, as an expiring lease, while stopping.
		p.loseRestoring(fmt.Sprintf("lease object replaced below our version (task %q, version %d)", l.TaskID, l.Instance.Version), cause, inst, rec.ETag, deadline)
	case !l.Acquirable:
		p.lose("node id marked unusable (scaled down)", cause)
	case !l.Held():
		p.lose("lease released by someone else", cause)
	case l.TaskID != p.cfg.TaskID || l.Instance != inst:
		p.lose(fmt.Sprintf("lease overwritten by task %q with version %d", l.TaskID, l.Instance.Version), cause)
	default:
		p.lose("lease overwritten", cause)
	}
	return 0, false
}

// renewed records a successful renewal sent at sent. A success that arrives
// after the self-fence deadline does not revive the lease: once past it, the
// holder has stopped and stays stopped.
func (p *Provider) renewed(sent time.Time, etag string) (time.Duration, bool) {
	now := p.cfg.Clock.Now()
	p.mu.Lock()
	if p.state != stateHolding {
		p.mu.Unlock()
		return 0, false
	}
	if !p.mayRenew(p.deadline, now) {
		p.mu.Unlock()
		p.lose("renewal answered after the self-fence deadline", nil)
		return 0, false
	}
	p.etag = etag
	p.unreadSince = time.Time{}
	if d := p.validUntil(sent); d.After(p.deadline) {
		p.deadline = d
	}
	clear(p.pending)
	p.renewFails = 0
	inst, deadline := p.instance, p.deadline
	p.mu.Unlock()
	p.tlog.Debug("renewal landed", "took_seconds", now.Sub(sent).Seconds(), "left_seconds", deadline.Sub(now).Seconds())
	p.stats.renewals.Add(1)
	p.emit(Event{Kind: EventRenewed, Instance: inst, Deadline: deadline, Latency: now.Sub(sent)})
	return max(sent.Add(p.cfg.RenewInterval).Sub(now), 0), true
}

// boundedContext returns a context for one request that ends at the request
// timeout or at the self-fence deadline, whichever is first.
func (p *Provider) boundedContext(deadline, now time.Time) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), max(min(p.cfg.RequestTimeout, p.rules.left(deadline, now)), time.Millisecond))
}

func (p *Provider) retryDelay() time.Duration {
	return p.jitter(min(max(p.cfg.RenewInterval/5, 50*time.Millisecond), time.Second))
}

// watchdog fences the holder at its deadline. It is a timer, not a network
// call, so it fires even while a renewal hangs.
func (p *Provider) watchdog() {
	t := p.cfg.Clock.NewTimer(time.Hour)
	defer t.Stop()
	for {
		p.mu.Lock()
		st, deadline := p.state, p.deadline
		p.mu.Unlock()
		if st != stateHolding {
			return
		}
		left := p.rules.left(deadline, p.cfg.Clock.Now())
		if left <= 0 {
			p.stats.selfFences.Add(1)
			p.lose(reasonSelfFence, nil)
			return
		}
		t.Reset(left)
		select {
		case <-t.C():
		case <-p.done:
			return
		}
	}
}

const reasonSelfFence = "not renewed before the self-fence deadline"

// lose ends the tenure: from here on Valid is false. OnLost runs outside the
// lock.
func (p *Provider) lose(reason string, cause error) { p.loseThen(reason, cause, nil) }

// loseRestoring loses the lease, then writes the object back at inst's
// version as an expiring lease (recreateDeleted), before OnLost runs: Valid
// is false and Done closed from the start, and the write is still bounded by
// the old deadline.
func (p *Provider) loseRestoring(reason string, cause error, inst NodeInstance, etag string, deadline time.Time) {
	p.loseThen(reason, cause, func() { p.recreateDeleted(inst, etag, deadline) })
}

// loseThen ends the tenure (Valid false, Done closed), calls OnFence
// first, then logs, runs then, if any, emits, and calls OnLost. OnFence
// comes before the log line: a stalled stderr must not delay the kill.
// then (the restore of our version over a deleted or lower object: S3
// only, bounded by the old deadline) comes before the event, whose
// handlers may do file I/O that hangs (a lease file on a stuck file
// system): a stalled handler must not let the deadline pass unrestored.
func (p *Provider) loseThen(reason string, cause error, then func()) {
	p.mu.Lock()
	if p.state != stateHolding {
		p.mu.Unlock()
		return
	}
	p.state = stateLost
	err := &LostError{Instance: p.instance, Reason: reason, Err: cause}
	p.err = err
	close(p.done)
	p.mu.Unlock()
	if p.cfg.OnFence != nil {
		p.cfg.OnFence(err)
	}
	attrs := []any{"reason", reason}
	if cause != nil {
		attrs = append(attrs, "err", cause)
	}
	p.tlog.Error("lease lost", attrs...)
	if then != nil {
		then()
	}
	p.emit(Event{Kind: EventLost, Instance: err.Instance, Err: err, SelfFence: reason == reasonSelfFence})
	p.cfg.OnLost(err)
}
