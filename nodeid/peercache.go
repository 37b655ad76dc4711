package nodeid

import (
	"context"
	"errors"
	"time"
)

// peerReadsPerRefresh bounds the GETs of a steady-state refresh for slots
// that neither the cache nor a tenure object explains; one more reads the
// peer read least recently. Readiness reads are not bounded by it.
const peerReadsPerRefresh = 4

// refreshNodesPerL: above this many nodes the default refresh interval
// grows with the cluster (Config.MappingsRefreshInterval), so the
// cluster's LIST rate stays about constant.
const refreshNodesPerL = 333

// peerCache is what the refresh loop of one tenure knows of the peers
// (docs/design.md, "Learning peers at scale"). Only refreshLoop uses it.
type peerCache struct {
	peers     map[int]cachedPeer
	confirmed map[int]confirmation // peers whose lease listed our version (readiness)
	published bool                 // our tenure object exists
	gcDenied  bool                 // a delete of our old tenure objects was refused: no more tries
	gcWarned  bool                 // a failed delete was logged (once per tenure)
}

// confirmation is a read that showed our version in a peer's lease. It
// belongs to that holder and that object: a different cached holder or
// version (a newer tenure object), a listed size other than the one read
// (another writer's body, e.g. a Camunda broker's take), a release or a
// listing that shows the lease expired each end it (confirms).
type confirmation struct {
	version Version
	taskID  string
	size    int64
}

// confirms reports whether id's confirmation still stands for the holder
// cached as e and the slot listed as s.
func (c *peerCache) confirms(s Slot, e cachedPeer, have bool) bool {
	cf, ok := c.confirmed[s.ID]
	return ok && have && !e.corrupt && e.lease.Held() &&
		cf.version == e.lease.Instance.Version && cf.taskID == e.lease.TaskID && cf.size == s.Size
}

// cachedPeer is the last reading of one peer: a lease read by GET, or one
// built from its newest tenure object (readAt zero), or a corrupt object.
type cachedPeer struct {
	lease   Lease
	corrupt bool
	etag    string    // of the object read (corrupt: to see it change)
	lm      time.Time // Last-Modified when read
	readAt  time.Time // when last read by GET; zero if never
}

func newPeerCache() *peerCache {
	return &peerCache{peers: map[int]cachedPeer{}, confirmed: map[int]confirmation{}}
}

// publishTenure creates the tenure object of inst, which we hold, and
// reports whether it exists (a 412: an earlier attempt, or our hand-off's
// acquirer, created it). Without a TenureRepository there is nothing to do.
func (p *Provider) publishTenure(inst NodeInstance) bool {
	tr, ok := p.repo.(TenureRepository)
	if !ok {
		return true
	}
	t := TenureObject{ID: inst.ID, Version: inst.Version, LeaseDuration: p.cfg.LeaseDuration, Address: p.cfg.Address, TaskID: p.cfg.TaskID}
	if _, ok := TenureKey("", t); !ok {
		return true // cannot be named: peers read our lease instead
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.RequestTimeout/2)
	err := tr.CreateTenure(ctx, t)
	cancel()
	if err == nil || errors.Is(err, ErrPreconditionFailed) {
		return true
	}
	p.log.Debug("tenure object not written yet", "node_id", inst.ID, "version", int64(inst.Version), "err", err)
	return false
}

// collectTenures deletes the tenure objects of our own ID below our version:
// tenures that ended before ours began. Nothing else is ours to delete.
func (p *Provider) collectTenures(tr TenureRepository, c *peerCache, inst NodeInstance, tenures []TenureObject) {
	if c.gcDenied {
		return
	}
	for _, t := range tenures {
		if t.ID != inst.ID || t.Version >= inst.Version {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.RequestTimeout)
		err := tr.DeleteTenure(ctx, t)
		cancel()
		if err != nil {
			if !c.gcWarned {
				p.tlog.Warn("old tenure objects of this node id are not deleted", "err", err)
				c.gcWarned = true
			}
			c.gcDenied = errors.Is(err, ErrAccessDenied)
			return
		}
	}
}

// refreshCached is refresh on a TenureRepository: a lease listing and a
// tenure listing, GETs only where they do not explain a slot, and, until
// ready, the reads readiness needs.
func (p *Provider) refreshCached(tr TenureRepository, c *peerCache) {
	p.mu.Lock()
	inst, ready := p.instance, p.ready
	c.published = c.published || p.published
	p.mu.Unlock()
	if !c.published {
		c.published = p.publishTenure(inst)
	}
	listing, err := p.list(context.Background())
	if err != nil {
		p.setPeers(p.agedPeers(nil))
		p.mu.Lock()
		p.decideReadiness(inst, false)
		return
	}
	newest := map[int]TenureObject{}
	tenures, terr := listing.Tenures, error(nil)
	if !listing.TenuresListed {
		tctx, cancel := context.WithTimeout(context.Background(), 2*p.cfg.RequestTimeout)
		tenures, terr = tr.ListTenures(tctx)
		cancel()
	}
	if terr == nil {
		for _, t := range tenures {
			if n, ok := newest[t.ID]; !ok || t.Version > n.Version {
				newest[t.ID] = t
			}
		}
		p.collectTenures(tr, c, inst, tenures)
	}
	cluster, clusterKnown := p.heldClusterLease()
	now := p.cfg.Clock.Now()
	peersKnow := clusterKnown
	listed := map[int]Slot{}
	for _, s := range listing.Slots {
		if s.ID != inst.ID {
			listed[s.ID] = s
		}
	}
	for id := range c.peers {
		if _, ok := listed[id]; !ok {
			delete(c.peers, id)
		}
	}
	for id := range c.confirmed {
		if _, ok := listed[id]; !ok {
			delete(c.confirmed, id)
		}
	}

	// Which slots to read: those nothing explains (bounded), the least
	// recently read one, and, until ready, every one that may be live.
	reads := map[int]bool{}
	budget := peerReadsPerRefresh
	oldest, oldestAt := -1, time.Time{}
	for _, s := range listing.Slots {
		if s.ID == inst.ID {
			continue
		}
		e, have := c.peers[s.ID]
		if t, ok := newest[s.ID]; ok && (!have || t.Version > e.lease.Instance.Version) {
			// A new tenure: its key says all a peer needs. No lease object
			// was read (no etag): the listing's size may still say that
			// this holder has released since.
			e = cachedPeer{lease: t.lease(), lm: s.LastModified}
			c.peers[s.ID], have = e, true
		}
		if have && !e.corrupt && e.lease.Held() && sizeSuggestsReleased(s.Size) && s.ETag != e.etag {
			// Released since (the size says): remembered, so that a later
			// holder without a tenure object is read.
			e.lease = Lease{Instance: e.lease.Instance, Acquirable: e.lease.Acquirable, Legacy: s.Size == 0}
			e.etag = s.ETag
			c.peers[s.ID] = e
		}
		unexplained := !have ||
			(e.corrupt && e.etag != s.ETag) ||
			(!e.corrupt && !e.lease.Held() && !sizeSuggestsReleased(s.Size) && e.etag != s.ETag)
		if unexplained && budget > 0 {
			reads[s.ID] = true
			budget--
		}
		if have && !e.corrupt && e.lease.Foreign() {
			// Camunda's broker writes no tenure object and its take looks
			// like a renewal in a listing: read at every refresh, as before
			// issue 25. Only during a migration, and bounded by their count.
			// So a Camunda broker's confirmation is never kept unread.
			reads[s.ID] = true
		}
		if p.listedExpired(s, e, have, listing.ServerDate, cluster) {
			delete(c.confirmed, s.ID) // its next holder must show our version itself
		} else if !ready && !c.confirms(s, e, have) {
			reads[s.ID] = true
		}
		if oldest < 0 || e.readAt.Before(oldestAt) {
			oldest, oldestAt = s.ID, e.readAt
		}
	}
	if oldest >= 0 {
		reads[oldest] = true
	}

	fresh := map[int]Peer{}
	learned := VersionMappings{}
	for _, s := range listing.Slots {
		if s.ID == inst.ID {
			continue
		}
		var rec Record
		if reads[s.ID] {
			gctx, cancel := context.WithTimeout(context.Background(), p.cfg.RequestTimeout)
			got, err := p.repo.Get(gctx, s.ID)
			cancel()
			switch {
			case errors.Is(err, ErrCorruptLease):
				c.peers[s.ID] = cachedPeer{corrupt: true, etag: got.ETag, readAt: now}
				fresh[s.ID] = Peer{ID: s.ID, State: PeerCorrupt}
				continue
			case errors.Is(err, ErrNotFound):
				delete(c.peers, s.ID)
				fresh[s.ID] = Peer{ID: s.ID, State: PeerMissing}
				continue
			case err != nil:
				// Its holder may be live and not know our version.
				peersKnow = false
				if _, have := c.peers[s.ID]; !have {
					continue
				}
			default:
				c.peers[s.ID] = cachedPeer{lease: got.Lease, etag: got.ETag, lm: got.LastModified, readAt: now}
				rec = got
				knows := got.Lease.Held() && got.Lease.KnownVersions[inst.ID] >= inst.Version
				if knows {
					c.confirmed[s.ID] = confirmation{version: got.Lease.Instance.Version, taskID: got.Lease.TaskID, size: got.Size}
				} else {
					delete(c.confirmed, s.ID)
				}
				if !knows && got.Lease.Held() && liveByServerClock(got, p.cfg.LeaseDuration, cluster) {
					peersKnow = false
				}
			}
		}
		e, have := c.peers[s.ID]
		if !have {
			// Not read yet (over the budget): nothing known of it.
			fresh[s.ID] = Peer{ID: s.ID, State: PeerUnknown}
			if !ready {
				peersKnow = false
			}
			continue
		}
		if e.corrupt {
			fresh[s.ID] = Peer{ID: s.ID, State: PeerCorrupt}
			continue
		}
		if rec.ServerDate.IsZero() {
			rec = e.recordAt(s, listing.ServerDate)
		}
		fresh[s.ID] = peerOf(rec, p.cfg.LeaseDuration, cluster)
		learned.Observe(s.ID, rec.Lease.Instance.Version)
		if !ready && !c.confirms(s, e, true) && rec.Lease.Held() && liveByServerClock(rec, p.cfg.LeaseDuration, cluster) {
			peersKnow = false
		}
	}
	for id := range p.clusterSize() {
		if _, ok := listed[id]; !ok && id != inst.ID {
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

// recordAt is the cached reading judged by a listing's slot: the listing's
// ETag, Last-Modified, size and Date with the cached lease. A size that says
// released turns a cached holder into a release at the same version (the
// size is a hint; the next read of the peer decides).
func (e cachedPeer) recordAt(s Slot, date time.Time) Record {
	l := e.lease
	if l.Held() && sizeSuggestsReleased(s.Size) && s.ETag != e.etag {
		l = Lease{Instance: l.Instance, Acquirable: l.Acquirable, Legacy: s.Size == 0}
	}
	if l.Foreign() && !l.Expires.IsZero() && !e.lm.IsZero() {
		// Camunda's timestamp moves with each renewal: keep the duration it
		// claimed when read (ClaimedDuration) rather than let it shrink.
		l.Expires = l.Expires.Add(s.LastModified.Sub(e.lm))
	}
	return Record{Slot: s, Lease: l, ServerDate: date}
}

// listedExpired reports whether the listing proves the slot's holder no
// longer valid by the server's clock, with the cached holder's duration
// (ours and the cluster's when nothing is cached).
func (p *Provider) listedExpired(s Slot, e cachedPeer, have bool, date time.Time, cluster time.Duration) bool {
	rec := Record{Slot: s, ServerDate: date}
	if have && !e.corrupt {
		rec = e.recordAt(s, date)
	}
	return !date.IsZero() && ExpiredByServerClock(s.LastModified, date, HolderDuration(rec, p.cfg.LeaseDuration, cluster))
}

// liveByServerClock reports whether rec's holder is not yet expired by the
// server's clock, judged with the longest duration any task may have.
func liveByServerClock(rec Record, own, cluster time.Duration) bool {
	return !ExpiredByServerClock(rec.LastModified, rec.ServerDate, HolderDuration(rec, own, cluster))
}
