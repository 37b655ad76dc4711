package nodeid

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"time"
)

// tryListing tries the candidates of one listing, each with one GET and one
// conditional PUT, and reports whether one was taken. It stops early and
// reports the listing stale when another task took a slot since the listing
// (a GET shows a new holder, or our PUT lost the race): with many tasks
// starting together a fresh listing is cheaper than a GET per stale slot.
//
// Objects this task has just created are not read back: their content and
// ETag are known, and the conditional PUT fails harmlessly if they changed
// meanwhile.
func (p *Provider) tryListing(ctx context.Context, listing Listing, created []Record) passResult {
	cands := p.candidates(listing, created)
	// Every allowed ID the listing shows and that is no candidate is held
	// by the listing alone; candidates judged not free add to it.
	held := 0
	for _, id := range p.allowedIDs() {
		if _, ok := listing.Slot(id); ok && !slices.ContainsFunc(cands, func(c Slot) bool { return c.ID == id }) {
			held++
		}
	}
	for _, slot := range cands {
		var rec Record
		var err error
		if i := slices.IndexFunc(created, func(r Record) bool { return r.ID == slot.ID && r.ETag == slot.ETag }); i >= 0 && !slot.LastModified.IsZero() {
			// Its Last-Modified comes from the listing: the same body
			// landing again later (a duplicated request after an outside
			// delete) has the same ETag but a later time.
			rec = created[i]
			rec.LastModified, rec.ServerDate = slot.LastModified, listing.ServerDate
		} else {
			rec, err = p.get(ctx, slot.ID)
		}
		arrived := p.cfg.Clock.Now()
		if errors.Is(err, ErrCorruptLease) {
			p.log.Warn("skipping corrupt lease object", "node_id", slot.ID, "etag", rec.ETag, "err", err)
			continue
		}
		if err != nil {
			p.log.Debug("candidate skipped: its lease could not be read", "node_id", slot.ID, "err", err)
			continue
		}
		p.seen.see(slot.ID, rec.ETag, arrived)
		p.learn(rec.Lease)
		v := p.judge(ctx, rec, arrived)
		p.logVerdict(rec, v)
		if !v.Free {
			held++
			if rec.ETag != slot.ETag {
				return passResult{stale: true, held: held}
			}
			continue
		}
		if inst, ok := p.take(ctx, rec, v.Graceful); ok {
			return passResult{inst: inst, taken: true}
		}
		return passResult{stale: true, held: held}
	}
	return passResult{held: held}
}

// logVerdict logs, at debug, how a candidate was judged and why.
func (p *Provider) logVerdict(rec Record, v Verdict) {
	if !p.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	l := rec.Lease
	var why string
	switch {
	case !l.Acquirable:
		why = "marked unusable (scaled down)"
	case v.NoMarker:
		why = "the cluster marker could not be read: only a release is free"
	case v.Free && !v.ByExpiry && l.Forced:
		why = "released by force: free, not graceful"
	case v.Free && !v.ByExpiry && l.Instance.Version > 0:
		why = "released by its holder"
	case v.Free && !v.ByExpiry:
		why = "never held, made at the cluster's creation"
	case v.Free:
		why = "expired"
	default:
		why = "held: not expired"
	}
	attrs := []any{"node_id", rec.ID, "free", v.Free, "graceful", v.Graceful, "reason", why,
		"holder_task", l.TaskID, "holder_version", int64(l.Instance.Version)}
	if v.ByExpiry {
		attrs = append(attrs, "lease_seconds", v.Lease.Seconds())
		if !rec.LastModified.IsZero() && !rec.ServerDate.IsZero() {
			attrs = append(attrs, "written_ago_seconds", rec.ServerDate.Sub(rec.LastModified).Seconds())
		}
	}
	p.log.Debug("candidate judged", attrs...)
}

// candidates returns the allowed slots that may be free by the listing alone,
// starting with the objects this task has just created (each object has one
// creator, so creators that take their own do not collide), else with a
// task-specific slot (so tasks starting together spread over the IDs instead
// of all racing for ID 0), then released ones, then the rest, each group in
// random order.
func (p *Provider) candidates(listing Listing, created []Record) []Slot {
	allowed := p.allowedIDs()
	if len(allowed) == 0 {
		return nil
	}
	offset := int(taskHash(p.cfg.TaskID) % uint32(len(allowed)))
	now := p.cfg.Clock.Now()

	var first, released, expired []Slot
	for _, c := range created {
		if slot, ok := listing.Slot(c.ID); ok && slot.ETag == c.ETag && slices.Contains(allowed, c.ID) {
			first = append(first, slot)
		}
	}
	for i := range allowed {
		slot, ok := listing.Slot(allowed[(offset+i)%len(allowed)])
		if !ok || slices.ContainsFunc(first, func(f Slot) bool { return f.ID == slot.ID }) {
			continue
		}
		switch {
		case i == 0 && len(created) == 0 && (sizeSuggestsReleased(slot.Size) || p.expiredByListing(slot, listing.ServerDate, now)):
			first = append(first, slot)
		case sizeSuggestsReleased(slot.Size):
			released = append(released, slot)
		case p.expiredByListing(slot, listing.ServerDate, now):
			expired = append(expired, slot)
		}
	}
	p.shuffle(released)
	p.shuffle(expired)
	cands := append(append(first, released...), expired...)
	if p.log.Enabled(context.Background(), slog.LevelDebug) {
		ids := make([]int, len(cands))
		for i, c := range cands {
			ids[i] = c.ID
		}
		p.log.Debug("listing read", "objects", len(listing.Slots), "candidates", ids,
			"reason", "the others are neither released nor expired by the listing")
	}
	return cands
}

func (p *Provider) expiredByListing(s Slot, serverDate, now time.Time) bool {
	L := p.cfg.LeaseDuration
	return ExpiredByServerClock(s.LastModified, serverDate, L) || p.seen.unchangedFor(s.ID, s.ETag, now) >= L
}

func (p *Provider) allowedIDs() []int {
	if len(p.cfg.AllowedIDs) > 0 {
		ids := append([]int(nil), p.cfg.AllowedIDs...)
		sort.Ints(ids)
		return ids
	}
	ids := make([]int, p.clusterSize())
	for i := range ids {
		ids[i] = i
	}
	return ids
}

// checkClusterLease refuses a lease duration above the cluster's (recorded in
// the marker): waiters judge a lease whose object no longer records its
// holder's duration by the cluster's, so a longer one could be taken while
// its holder still acts.
func (p *Provider) checkClusterLease(ctx context.Context) error {
	m, err := p.clusterMarker(ctx)
	if err != nil {
		return err
	}
	if L := m.LeaseDuration; L > 0 && p.cfg.LeaseDuration > L {
		return fmt.Errorf("%w: lease duration %v is longer than the cluster's %v (recorded in %s when it was created); use %v or less", ErrInvalidConfig, p.cfg.LeaseDuration, L, MarkerKeyName, L)
	}
	return nil
}

// clusterMarker returns the cluster marker, read once per acquisition. Until
// it exists it is the zero marker, which proves nothing fresh; an error means
// it could not be read, and then nothing may be judged by it.
func (p *Provider) clusterMarker(ctx context.Context) (ClusterMarker, error) {
	if p.marker == nil {
		gctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
		m, err := p.repo.Marker(gctx)
		cancel()
		switch {
		case errors.Is(err, ErrNotFound):
			return ClusterMarker{}, nil // none yet: it proves nothing
		case err != nil:
			return ClusterMarker{}, fmt.Errorf("reading the cluster marker: %w", err)
		}
		p.marker = &m
	}
	return *p.marker, nil
}

// learn records the versions a lease read while acquiring shows, so the
// version we take is above every version anyone knows, even if the object
// itself went back (an outside delete and recreation).
func (p *Provider) learn(l Lease) {
	p.acqKnown.Observe(l.Instance.ID, l.Instance.Version)
	for id, v := range l.KnownVersions {
		p.acqKnown.Observe(id, v)
	}
}

// take writes our lease over rec with one conditional PUT.
func (p *Provider) take(ctx context.Context, rec Record, graceful bool) (NodeInstance, bool) {
	p.learn(rec.Lease)
	if l := rec.Lease; l.Held() || l.Instance.Version > 0 || l.Legacy || !graceful {
		// The object's version may be below one handed out before: an
		// outside overwrite, a recreation that landed late. Every lease's
		// knowledge is read first, so the version taken is above all that
		// the bucket records. Only a never-held object the marker proves
		// fresh (a start storm) needs none: its ID was never held. A LIST
		// and a GET per ID, once per takeover.
		if listing, err := p.list(ctx); err == nil {
			sctx, cancel := context.WithTimeout(ctx, time.Duration(len(listing.Slots)+1)*p.cfg.RequestTimeout)
			s := surveyLeases(sctx, p.repo, listing, 0)
			cancel()
			if err := p.rules.unread(s); err != nil {
				// A lease we could not read may record a version above
				// all we know: taking now could repeat it. Try later.
				p.log.Warn("not taking the node id: a lease could not be read", "node_id", rec.ID, "err", err)
				return NodeInstance{}, false
			}
			for id, v := range s.known {
				p.acqKnown.Observe(id, v)
			}
		} else {
			return NodeInstance{}, false
		}
	}
	if p.acqKnown[rec.ID] >= MaxVersion {
		p.log.Error("node id has reached the largest version; it cannot be taken again", "node_id", rec.ID, "version", int64(p.acqKnown[rec.ID]))
		return NodeInstance{}, false
	}
	inst := NodeInstance{ID: rec.ID, Version: p.rules.nextVersion(p.acqKnown, rec)}
	known := p.acqKnown.Clone()
	known.Observe(inst.ID, inst.Version)
	// The deadline and the timestamp both count from sent, read before the
	// body is built: a pause in between only makes the deadline earlier.
	sent := p.cfg.Clock.Now()
	lease := p.newLease(inst, known, sent)

	end, ok := p.beginTake()
	if !ok {
		return NodeInstance{}, false // closed
	}
	defer end()
	tctx, tcancel := p.takeContext(ctx)
	defer tcancel()
	p.stats.acquireAttempts.Add(1)
	p.emit(Event{Kind: EventAcquireAttempt, Instance: inst})
	p.log.Debug("taking node id", "node_id", inst.ID, "version", int64(inst.Version), "graceful", graceful)
	wctx, cancel := context.WithTimeout(tctx, p.cfg.RequestTimeout)
	etag, err := p.repo.Write(wctx, lease, rec.ETag)
	cancel()
	if err != nil {
		if isLostRace(err) || errors.Is(err, ErrNotFound) {
			p.log.Debug("lost the race for a node id", "node_id", inst.ID, "err", err)
			return NodeInstance{}, false
		}
		// No answer: the write may have landed. Look for our nonce; if we
		// cannot tell, leave it: an unrenewed lease simply expires.
		got, gerr := p.get(tctx, inst.ID)
		if gerr != nil || got.Lease.Nonce != lease.Nonce {
			p.log.Warn("acquisition write failed", "node_id", inst.ID, "version", int64(inst.Version), "err", err)
			return NodeInstance{}, false
		}
		etag = got.ETag
	}

	// The tenure object is written before Acquire returns, so that peers
	// learn the tenure at their next refresh; a failure leaves it to the
	// refresh loop.
	published := p.publishTenure(inst)
	t := tenure{inst: inst, etag: etag, deadline: p.validUntil(sent), acquired: sent, graceful: graceful, known: known, published: published}
	if err := p.hold(stateAcquiring, t, false); err != nil {
		return NodeInstance{}, false
	}
	return inst, true
}

// newLease is our lease of inst, to be sent at sent: the moment our deadline
// will count from, so its timestamp is not earlier than the deadline.
func (p *Provider) newLease(inst NodeInstance, known VersionMappings, sent time.Time) Lease {
	return Lease{
		TaskID:        p.cfg.TaskID,
		Instance:      inst,
		Expires:       p.expiryStamp(sent),
		Duration:      p.cfg.LeaseDuration,
		Nonce:         p.nonce(),
		KnownVersions: known,
		Acquirable:    true,
		Address:       p.cfg.Address,
	}
}

// expiryStamp is the timestamp of a lease whose deadline counts from sent:
// when it expires by the wall clock, for readers that judge by wall clocks
// (Camunda's provider). Our holder stops m before it by its own clock, which
// is what keeps such a reader with a clock up to m ahead from taking a live
// lease. The system wall clock is read after sent, so a pause in between
// only makes the timestamp later.
func (p *Provider) expiryStamp(sent time.Time) time.Time {
	if w := p.cfg.Wall(); w.After(sent) {
		sent = w
	}
	return sent.Add(p.cfg.LeaseDuration)
}
