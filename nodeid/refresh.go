package nodeid

import (
	"context"
	"errors"
	"time"
)

// refreshLoop learns the peers' versions for our lease's mappings, and
// decides readiness after an ungraceful takeover.
func (p *Provider) refreshLoop() {
	t := p.cfg.Clock.NewTimer(time.Hour)
	defer t.Stop()
	tr, cached := p.repo.(TenureRepository)
	c := newPeerCache()
	for {
		interval := p.cfg.MappingsRefreshInterval
		p.mu.Lock()
		if !p.ready {
			interval = min(interval, p.cfg.RenewInterval/2)
		}
		p.mu.Unlock()
		t.Reset(p.jitter(interval))
		select {
		case <-t.C():
		case <-p.done:
			return
		}
		if cached {
			p.refreshCached(tr, c)
		} else {
			p.refresh()
		}
	}
}

func (p *Provider) refresh() {
	p.mu.Lock()
	inst := p.instance
	p.mu.Unlock()
	// Each request has its own timeout: one budget for the whole round
	// would starve the last GETs of a large cluster, every round.
	lctx, cancel := context.WithTimeout(context.Background(), p.cfg.RequestTimeout)
	listing, err := p.repo.List(lctx)
	cancel()
	if err != nil {
		p.setPeers(p.agedPeers(nil))
		p.mu.Lock()
		p.decideReadiness(inst, false) // still fails open after ReadinessTimeout
		return
	}
	// A peer's object may no longer record its holder's lease duration:
	// judged by ours alone, a live holder with a longer one would look
	// expired. Without the cluster's, readiness waits for another round.
	cluster, clusterKnown := p.heldClusterLease()
	learned := VersionMappings{}
	peersKnow := clusterKnown
	fresh := map[int]Peer{}
	for _, s := range listing.Slots {
		if s.ID == inst.ID {
			continue
		}
		// Every peer is read: a listing's size is only a hint, and a
		// released lease's version is worth learning too.
		gctx, cancel := context.WithTimeout(context.Background(), p.cfg.RequestTimeout)
		rec, err := p.repo.Get(gctx, s.ID)
		cancel()
		switch {
		case errors.Is(err, ErrCorruptLease):
			fresh[s.ID] = Peer{ID: s.ID, State: PeerCorrupt}
		case errors.Is(err, ErrNotFound):
			fresh[s.ID] = Peer{ID: s.ID, State: PeerMissing}
		case err != nil:
			// No answer, 503, a timeout: its holder may be live and not
			// know our version. Only a peer read can be one that knows.
			peersKnow = false
		}
		if err != nil {
			continue
		}
		fresh[s.ID] = peerOf(rec, p.cfg.LeaseDuration, cluster)
		learned.Observe(s.ID, rec.Lease.Instance.Version)
		if !rec.Lease.Held() {
			continue
		}
		live := !ExpiredByServerClock(rec.LastModified, rec.ServerDate, HolderDuration(rec, p.cfg.LeaseDuration, cluster))
		if live && rec.Lease.KnownVersions[inst.ID] < inst.Version {
			peersKnow = false
		}
	}
	listed := map[int]bool{}
	for _, s := range listing.Slots {
		listed[s.ID] = true
	}
	for id := range p.clusterSize() {
		if !listed[id] && id != inst.ID {
			fresh[id] = Peer{ID: id, State: PeerMissing}
		}
	}
	table := p.agedPeers(fresh)

	p.setPeers(table)
	p.mu.Lock()
	for id, v := range learned {
		p.known.Observe(id, v)
	}
	p.decideReadiness(inst, peersKnow)
}

// decideReadiness, called with p.mu held and unlocking it, turns the
// provider ready when every live peer knows our version, or by timeout
// (fail-open, also while the listing fails).
func (p *Provider) decideReadiness(inst NodeInstance, peersKnow bool) {
	becameReady, failedOpen := false, false
	if !p.ready && p.state == stateHolding {
		switch {
		case peersKnow:
			p.ready, becameReady = true, true
		case p.cfg.Clock.Now().Sub(p.acquired) >= p.cfg.ReadinessTimeout:
			p.ready, failedOpen = true, true
		}
	}
	p.mu.Unlock()
	if becameReady {
		p.tlog.Info("ready: every live peer knows our version")
	}
	if failedOpen {
		p.tlog.Warn("ready by timeout: some peers do not know our version yet", "readiness_timeout_seconds", p.cfg.ReadinessTimeout.Seconds())
	}
	if becameReady || failedOpen {
		p.emit(Event{Kind: EventReady, Instance: inst})
	}
}

// heldClusterLease returns the cluster's lease duration (the marker's) for
// judging peers while holding: from the marker Acquire read (it is not
// written once the lease is held), else read now (an adopted lease, or a
// cluster that had no marker then). ok is false if it could not be read.
func (p *Provider) heldClusterLease() (d time.Duration, ok bool) {
	if p.marker != nil {
		return p.marker.LeaseDuration, true
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.RequestTimeout)
	m, err := p.repo.Marker(ctx)
	cancel()
	switch {
	case errors.Is(err, ErrNotFound):
		return 0, true
	case err != nil:
		return 0, false
	}
	return m.LeaseDuration, true
}
