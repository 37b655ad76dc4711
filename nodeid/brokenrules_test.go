package nodeid

import (
	"context"
	"time"

	"github.com/nodeid/nodeid/clock"
)

// simBug names a deliberate protocol bug. The simulation's teeth tests
// (TestSimulationFindsDeliberateBugs, make sim-teeth) turn them on one at a
// time to show that its invariants catch each one. They exist only here:
// most break one of the safety rules (brokenRules, which the simulation's
// repositories hand to the code under test through rulesOf); two are
// modelled in the simulation itself (bugNoNonce in what its storage stores,
// bugWriteAfterLoss in its tasks' OnEvent, at the loss).
type simBug uint

const (
	bugNoMargin              simBug = 1 << iota // validity until s + L instead of s + L - m
	bugWallClockExpiry                          // judge expiry by the holder's timestamp and our wall clock
	bugRenewAfterDeadline                       // accept renewals answered after the deadline; no watchdog
	bugNoNonce                                  // released and never-held bodies empty: equal ETags (ABA)
	bugScaleKeepsBody                           // Scale marks a released lease unusable without a new body
	bugFreshFromAbsence                         // fresh = no held object seen; never-held taken without the marker
	bugIgnoreClaimedDuration                    // a waiter ignores the duration a Camunda lease claims (Record.ClaimedDuration)
	bugVersionNotBumped                         // a take keeps the highest known version instead of version + 1
	bugVersionFromObject                        // a take ignores the known mappings: the object's version + 1
	bugWriteAfterLoss                           // a holder sends one more renewal after it lost its lease
	bugReleasedNeverFree                        // a waiter never counts a released lease as free
	bugAdoptStretches                           // Adopt inherits a lease duration more than the hand-off carried
	bugTakeAfterFailedSurvey                    // a take goes ahead although a lease of the survey could not be read
)

// brokenRules are the safe rules with the deliberate bugs in bugs switched
// on. lease is the simulation's lease duration; clock the task's clock (for
// the wall-clock bug).
type brokenRules struct {
	safeRules
	bugs  simBug
	lease time.Duration
	clock clock.Clock
}

func (r brokenRules) on(b simBug) bool { return r.bugs&b != 0 }

func (r brokenRules) validUntil(sent time.Time, lease, margin time.Duration) time.Time {
	if r.on(bugNoMargin) {
		return sent.Add(lease)
	}
	return r.safeRules.validUntil(sent, lease, margin)
}

func (r brokenRules) left(deadline, now time.Time) time.Duration {
	if r.on(bugRenewAfterDeadline) {
		// Never fenced: renewals go out and are accepted after the
		// deadline, requests run their full timeout (below L), and the
		// watchdog never fires.
		return max(r.safeRules.left(deadline, now), r.lease)
	}
	return r.safeRules.left(deadline, now)
}

func (r brokenRules) inherited(h Handoff, boot, lease, margin time.Duration) time.Duration {
	if r.on(bugAdoptStretches) {
		return r.safeRules.inherited(h, boot, lease, margin) + r.lease
	}
	return r.safeRules.inherited(h, boot, lease, margin)
}

func (r brokenRules) releasedFree(l Lease) (free, graceful bool) {
	free, graceful = r.safeRules.releasedFree(l)
	return free && !r.on(bugReleasedNeverFree), graceful
}

func (r brokenRules) provesFresh(m ClusterMarker, rec Record) bool {
	return r.on(bugFreshFromAbsence) || r.safeRules.provesFresh(m, rec)
}

func (r brokenRules) holderDuration(rec Record, own, cluster time.Duration) time.Duration {
	if r.on(bugIgnoreClaimedDuration) {
		return max(rec.Lease.Duration, own, cluster)
	}
	return r.safeRules.holderDuration(rec, own, cluster)
}

func (r brokenRules) expired(rec Record, lease, unchangedFor time.Duration) bool {
	if r.on(bugWallClockExpiry) {
		return !r.clock.Now().Before(rec.Lease.Expires)
	}
	return r.safeRules.expired(rec, lease, unchangedFor)
}

func (r brokenRules) unread(s survey) error {
	if r.on(bugTakeAfterFailedSurvey) {
		return nil
	}
	return r.safeRules.unread(s)
}

func (r brokenRules) nextVersion(known VersionMappings, rec Record) Version {
	switch {
	case r.on(bugVersionFromObject):
		return rec.Lease.Instance.Version + 1
	case r.on(bugVersionNotBumped):
		return max(known[rec.ID], 1)
	}
	return r.safeRules.nextVersion(known, rec)
}

func (r brokenRules) mayCreateFresh(markerSeen bool) bool {
	return r.on(bugFreshFromAbsence) || r.safeRules.mayCreateFresh(markerSeen)
}

func (r brokenRules) markRenewsBody(l Lease) bool {
	if r.on(bugScaleKeepsBody) {
		return l.Held()
	}
	return r.safeRules.markRenewsBody(l)
}

// rules are the rules the code under test decides by through this
// repository (rulesOf): the safe ones unless the run has deliberate bugs.
func (r *simRepo) rules() rules {
	if r.w.p.bugs == 0 {
		return safeRules{}
	}
	b := brokenRules{bugs: r.w.p.bugs, lease: r.w.p.lease}
	if r.task.clock != nil {
		b.clock = r.task.clock
	}
	return b
}

// encode is how the simulated storage turns a write into an object: as
// S3Repository does (Lease.Encode), or, with bugNoNonce, with released and
// never-held bodies empty, as before bodies had nonces: every such object
// then has one ETag.
func (w *simWorld) encode(l Lease) ([]byte, map[string]string) {
	body, meta := l.Encode()
	if w.p.bugs&bugNoNonce != 0 && !l.Held() {
		return nil, meta
	}
	return body, meta
}

// writeAfterLoss is bugWriteAfterLoss: the lost holder p sends one more
// renewal of its lease, when it reports the loss (before OnLost, and before
// a holder whose object was deleted restores it).
func writeAfterLoss(p *Provider) {
	p.mu.Lock()
	l, etag := p.newLease(p.instance, p.known.Clone(), p.cfg.Clock.Now()), p.etag
	p.mu.Unlock()
	wctx, cancel := context.WithTimeout(context.Background(), p.cfg.RequestTimeout)
	_, _ = p.repo.Write(wctx, l, etag)
	cancel()
}
