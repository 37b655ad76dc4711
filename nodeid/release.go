package nodeid

import (
	"errors"
	"fmt"
	"time"
)

// release runs on the renew loop after Close or HandOff.
func (p *Provider) release() {
	p.mu.Lock()
	if p.state != stateHolding {
		p.mu.Unlock()
		return
	}
	p.state = stateClosed
	p.err = ErrClosed
	close(p.done)
	inst, etag, deadline, detach := p.instance, p.etag, p.deadline, p.detach
	p.mu.Unlock()
	if detach {
		return // HandOff: the lease lives on in another process
	}

	released := Lease{
		Writer:        p.cfg.TaskID,
		Instance:      inst,
		Expires:       p.cfg.Clock.Now(),
		Duration:      p.cfg.LeaseDuration,
		Nonce:         p.nonce(),
		KnownVersions: p.KnownVersions(),
		Acquirable:    true,
	}
	ctx, cancel := p.boundedContext(deadline.Add(p.cfg.SafetyMargin), p.cfg.Clock.Now())
	defer cancel()
	if _, err := p.repo.Write(ctx, released, etag); err != nil {
		p.tlog.Warn("release failed; the lease will expire", "err", err)
		p.mu.Lock()
		p.relErr = fmt.Errorf("release %s: %w", inst, err)
		p.mu.Unlock()
		if isLostRace(err) || errors.Is(err, ErrNotFound) {
			// Deleted, or replaced (perhaps below our version), since our
			// last renewal: only we may know our version, so put it back
			// as an expiring lease, as a holder that finds its object
			// deleted does. recreateDeleted leaves anything at or above
			// our version alone.
			p.recreateDeleted(inst, "", deadline)
		}
		return
	}
	p.tlog.Info("released node id")
	p.emit(Event{Kind: EventReleased, Instance: inst})
	p.signalRelease()
}

// recreateDeleted runs when the holder finds its lease object deleted (or
// replaced below its version, or overwritten with a corrupt object), after it has stopped counting itself as the
// holder and before OnLost: it writes the object as an expiring lease of an
// unknown holder at the holder's own version. Only the holder may know that
// version (with one node ID, or before its peers learned it); without this
// the next holder would start again from a lower one. With etag empty the
// write is a create (If-None-Match: *), else it replaces the recreation it
// read (If-Match).
//
// A spare may recreate the object first, below our version, while we stop
// (Valid is already false): the create then gets 412, and the holder reads
// the object and replaces such a recreation, as often as it takes until its
// deadline. That is in time: the spare's recreation is itself an expiring
// lease of a full lease duration, written after our last renewal was sent,
// so no one can take the ID before our deadline. Bounded by the deadline,
// this cannot delay the stop past it.
func (p *Provider) recreateDeleted(inst NodeInstance, etag string, deadline time.Time) {
	for {
		now := p.cfg.Clock.Now()
		if !now.Before(deadline) {
			p.tlog.Warn("lease object not restored at our version before our deadline")
			return
		}
		l := Lease{
			TaskID:        recreatedPrefix + p.cfg.TaskID,
			Instance:      inst,
			Expires:       p.expiryStamp(now),
			Duration:      p.cfg.LeaseDuration,
			Nonce:         p.nonce(),
			KnownVersions: p.KnownVersions(),
			Acquirable:    true,
		}
		ctx, cancel := p.boundedContext(deadline, now)
		var err error
		if etag == "" {
			_, err = p.repo.Create(ctx, l)
		} else {
			_, err = p.repo.Write(ctx, l, etag)
		}
		cancel()
		if err == nil {
			p.tlog.Info("recreated the deleted lease object as an expiring lease at our version")
			return
		}
		p.tlog.Info("lease object not recreated at our version", "err", err)
		if errors.Is(err, ErrNotFound) {
			etag = "" // deleted again (AWS answers an If-Match on a missing key 404): create
			continue
		}
		if isLostRace(err) {
			// Someone wrote first. Replace it only if it is a recreation
			// below our version; anything else is left alone.
			ctx, cancel := p.boundedContext(deadline, p.cfg.Clock.Now())
			rec, gerr := p.repo.Get(ctx, inst.ID)
			cancel()
			switch {
			case errors.Is(gerr, ErrNotFound):
				etag = ""
				continue
			case errors.Is(gerr, ErrCorruptLease) && rec.ETag != "" && restorableOver(gerr, inst):
				etag = rec.ETag // corrupt again: it records no version, ours goes back
				continue
			case errors.Is(gerr, ErrCorruptLease) && rec.ETag != "":
				return // corrupt, but records a scale-down or a later version: not ours
			case gerr == nil && rec.Lease.Instance.ID == inst.ID && rec.Lease.Instance.Version < inst.Version && rec.Lease.Acquirable:
				p.tlog.Info("replacing a recreation below our version", "found_task", rec.Lease.TaskID, "found_version", int64(rec.Lease.Instance.Version))
				etag = rec.ETag
				continue
			case gerr == nil:
				return // at or above our version, or scaled down: not ours to touch
			}
		}
		wait := min(p.retryDelay(), deadline.Sub(p.cfg.Clock.Now()))
		if wait <= 0 {
			continue // the deadline check at the top ends it
		}
		t := p.cfg.Clock.NewTimer(wait)
		<-t.C()
		t.Stop()
	}
}
