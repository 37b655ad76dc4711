package nodeid

import (
	"context"
	"time"
)

// The safety rules of the protocol, in one place: what a renewal earns and
// until when a holder may act (renew.go), when another task's lease is free
// (judge, below), which version a take writes (take.go), what a hand-off
// passes on (handoff.go), and two rules of the bootstrap and of scaling
// (bootstrap.go, scale.go). docs/design.md argues each.
//
// They sit behind an interface only so that the simulation's teeth tests can
// break one at a time (brokenRules, in brokenrules_test.go) and show that
// the checker notices; production code always decides by safeRules.
type rules interface {
	// validUntil is the self-fence deadline a write SENT at sent earns, on
	// the holder's monotonic clock: s + L - m.
	validUntil(sent time.Time, lease, margin time.Duration) time.Time
	// left is how long a holder whose deadline is deadline may still act,
	// as of now. It sends a renewal, and accepts one's answer, only while
	// left > 0; each of its requests ends by then; its watchdog fences it
	// when left reaches 0.
	left(deadline, now time.Time) time.Duration
	// inherited is the validity an adopter takes over from a hand-off, as
	// of boot (CLOCK_BOOTTIME): never more than the acquirer had, nor more
	// than its last renewal earned (lease - margin from its send).
	inherited(h Handoff, boot, lease, margin time.Duration) time.Duration

	// releasedFree judges a lease its holder released (version >= 1, not
	// legacy): free at once, graceful unless forced.
	releasedFree(l Lease) (free, graceful bool)
	// provesFresh reports whether a never-held object is free at once: only
	// if the cluster marker names it (ClusterMarker.provesFresh).
	provesFresh(m ClusterMarker, rec Record) bool
	// holderDuration is the lease duration a waiter must assume the holder
	// of rec has: the longest of its own, ours, the cluster's (marker) and
	// the one a Camunda lease's timestamp claims.
	holderDuration(rec Record, own, cluster time.Duration) time.Duration
	// expired applies the two expiry rules to a held lease of duration
	// lease whose ETag we have seen unchanged for unchangedFor: the server's
	// clock (ExpiredByServerClock) or our own (observations). Neither
	// compares two machines' clocks.
	expired(rec Record, lease, unchangedFor time.Duration) bool
	// unread returns why a take may not go ahead after the survey s: a
	// lease it could not read may record a version above all we know.
	unread(s survey) error
	// nextVersion is the version a take of rec writes: above every version
	// known for its ID.
	nextVersion(known VersionMappings, rec Record) Version

	// mayCreateFresh reports whether the bootstrap may create never-held
	// objects: only while the cluster has no marker (markerSeen false).
	mayCreateFresh(markerSeen bool) bool
	// markRenewsBody reports whether marking l (un)usable writes a new body
	// with a fresh nonce: always, held or released, so that an If-Match
	// read before the mark cannot land after it (see Scale).
	markRenewsBody(l Lease) bool
}

type safeRules struct{}

func (safeRules) validUntil(sent time.Time, lease, margin time.Duration) time.Time {
	return sent.Add(lease - margin)
}

func (safeRules) left(deadline, now time.Time) time.Duration { return deadline.Sub(now) }

func (safeRules) inherited(h Handoff, boot, lease, margin time.Duration) time.Duration {
	earned := time.Duration(h.RenewalSentBoottimeNs) + lease - margin
	return min(time.Duration(h.ValidUntilBoottimeNs), earned) - boot
}

func (safeRules) releasedFree(l Lease) (free, graceful bool) { return true, !l.Forced }

func (safeRules) provesFresh(m ClusterMarker, rec Record) bool { return m.provesFresh(rec) }

func (safeRules) holderDuration(rec Record, own, cluster time.Duration) time.Duration {
	return HolderDuration(rec, own, cluster)
}

// HolderDuration is how long a waiter must assume the holder of rec lasts
// after its last write: the longest of the duration the object records,
// own (the waiter's), cluster (the cluster marker's: the object may no
// longer record its holder's, and no task exceeds the cluster's) and the
// one a Camunda lease's timestamp claims. Every judgement of another task's
// lease uses it: takes, the peer table, readiness, status and the admin
// commands' guards. For an object that records nothing (corrupt, missing)
// pass a zero Record.
func HolderDuration(rec Record, own, cluster time.Duration) time.Duration {
	return max(rec.Lease.Duration, own, cluster, rec.ClaimedDuration())
}

func (safeRules) expired(rec Record, lease, unchangedFor time.Duration) bool {
	return ExpiredByServerClock(rec.LastModified, rec.ServerDate, lease) || unchangedFor >= lease
}

func (safeRules) unread(s survey) error { return s.unreadExcept(-1) }

func (safeRules) nextVersion(known VersionMappings, rec Record) Version { return known[rec.ID] + 1 }

func (safeRules) mayCreateFresh(markerSeen bool) bool { return !markerSeen }

func (safeRules) markRenewsBody(Lease) bool { return true }

// validUntil is the self-fence deadline a write sent at sent earns.
func (p *Provider) validUntil(sent time.Time) time.Time {
	return p.rules.validUntil(sent, p.cfg.LeaseDuration, p.cfg.SafetyMargin)
}

// mayRenew reports whether a holder whose deadline is deadline may, at now,
// still send a renewal or accept one's answer.
func (p *Provider) mayRenew(deadline, now time.Time) bool {
	return p.rules.left(deadline, now) > 0
}

// rulesOf returns the rules to decide by: safeRules, unless repo is a test's
// repository that carries deliberately broken ones (the simulation's teeth
// tests).
func rulesOf(repo Repository) rules {
	if r, ok := repo.(interface{ rules() rules }); ok {
		return r.rules()
	}
	return safeRules{}
}

// judge decides whether the lease in rec may be taken, and whether its
// previous holder stopped gracefully (so its data may be hard-linked). The
// decision itself is judgeLease's, which status shares (Judge).
func (p *Provider) judge(ctx context.Context, rec Record, arrived time.Time) Verdict {
	return judgeLease(p.rules, rec, func() (ClusterMarker, error) { return p.clusterMarker(ctx) },
		p.cfg.LeaseDuration, p.seen.unchangedFor(rec.ID, rec.ETag, arrived))
}

// Verdict is how a waiting task judges one lease object.
type Verdict struct {
	// Free: the task takes it now.
	Free bool
	// Graceful: its previous holder stopped gracefully, so its data may be
	// hard-linked (only when Free).
	Graceful bool
	// ByExpiry: judged like a held lease (a held one, a legacy empty
	// release, a never-held object the marker does not prove fresh): free
	// once it has expired, Lease + 1 s after its last write by S3's clock
	// (ExpiredByServerClock), or Lease after the waiter first saw its ETag.
	ByExpiry bool
	// Lease is the holder duration it is judged by (when ByExpiry).
	Lease time.Duration
	// NoMarker: the cluster marker could not be read, and without it
	// nothing but a release is free.
	NoMarker bool
}

// Judge is the verdict a waiting task of lease duration own reaches on rec
// with the cluster marker marker (the zero marker if there is none), on
// its first look at the object: what `nodeid-init status` shows. It is the
// provider's own rule (judgeLease), not a copy of it.
func Judge(rec Record, marker ClusterMarker, own time.Duration) Verdict {
	return judgeLease(safeRules{}, rec, func() (ClusterMarker, error) { return marker, nil }, own, 0)
}

// judgeLease is the rule of judge. marker is called only when the decision
// needs the cluster marker; unchangedFor is how long the waiter has seen
// rec's ETag unchanged (rule 2).
//
//   - A lease released by its holder (version >= 1) is free at once.
//   - A never-held lease (version 0) is free at once only if the cluster
//     marker names its ETag: it is then the object made at bootstrap,
//     unchanged. Any other never-held object was created after the marker
//     (an outside delete, a stale view): its ID may have a live holder, so
//     it is judged like a held lease.
//   - A forced release (release --force) is free at once but not graceful:
//     an operator's word that the holder is dead does not stop its writes.
//   - A legacy (empty) released object is judged like a held lease, and is
//     never graceful: every empty object has the same ETag, so it proves
//     nothing about which release it is, and an If-Match on it lands on any
//     later empty state. Waiting until it has been quiet for a lease
//     duration keeps a writer of empty bodies that is still active (an older
//     version of this tool) from slipping a tenure in between.
//   - A held lease is free when either expiry rule says so.
func judgeLease(r rules, rec Record, marker func() (ClusterMarker, error), own, unchangedFor time.Duration) Verdict {
	l := rec.Lease
	if !l.Acquirable {
		return Verdict{}
	}
	if !l.Held() && l.Instance.Version > 0 && !l.Legacy {
		free, graceful := r.releasedFree(l)
		return Verdict{Free: free, Graceful: graceful}
	}
	m, err := marker()
	if err != nil {
		return Verdict{NoMarker: true} // without the marker neither proof nor floor: wait
	}
	if !l.Held() && !l.Legacy && r.provesFresh(m, rec) {
		return Verdict{Free: true, Graceful: true}
	}
	// The holder's own duration may be gone from the object (overwritten,
	// or recreated by a task with a shorter one): the cluster's, recorded in
	// the marker, is a floor that no task exceeds (Acquire refuses one that
	// would).
	//
	// A lease of Camunda's provider records no duration; the one its
	// timestamp claims is a floor too (see Record.ClaimedDuration).
	lease := r.holderDuration(rec, own, m.LeaseDuration)
	return Verdict{Free: r.expired(rec, lease, unchangedFor), ByExpiry: true, Lease: lease}
}
