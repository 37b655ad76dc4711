package nodeid

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrVersionUnknown is returned by ForceRelease when the object of the node
// is missing or corrupt and no version was given: releasing at a guess
// could hand out a version twice.
var ErrVersionUnknown = errors.New("the version of the node is unknown")

// ForceRelease releases node id whoever holds it, for operators, and returns
// the version it was released at. The version never goes down: it is the
// largest of the object's, any peer's knowledge and atLeast (the operator's
// word, e.g. the newest version in the data root; 0 if not known). With a
// missing or corrupt object atLeast is required (ErrVersionUnknown): the
// peers may not have learned the last holder's version yet (a holder is
// ready before they do after a readiness timeout, and a version is only
// known once a peer's refresh has read it), so their knowledge is no floor
// for it.
//
// The holder, if alive, fails its next renewal and fences itself, but it may
// still act until its self-fence deadline, so only use this when the holder
// is known to be dead. The release is marked forced: the successor takes it
// at once but copies the data rather than hard-linking it.
func ForceRelease(ctx context.Context, repo Repository, id int, atLeast Version, taskID string) (Version, error) {
	return forceRelease(ctx, repo, id, atLeast, taskID, newNonce)
}

// ForceReleaseIfUnchanged is ForceRelease for a caller that checked the
// object first (an operator's guard that refuses a live holder): it writes
// only over the object with ETag etag (If-Match), or, with etag "", only if
// the object is still missing (If-None-Match). If the object changed since,
// e.g. a new holder took the ID, nothing is written and the error wraps
// ErrChanged.
func ForceReleaseIfUnchanged(ctx context.Context, repo Repository, id int, atLeast Version, taskID string, etag string) (Version, error) {
	return forceReleaseChecked(ctx, repo, id, atLeast, taskID, newNonce, &etag)
}

// forceRelease is ForceRelease with its source of nonces (the simulation's
// is seeded).
func forceRelease(ctx context.Context, repo Repository, id int, atLeast Version, taskID string, nonce func() string) (Version, error) {
	return forceReleaseChecked(ctx, repo, id, atLeast, taskID, nonce, nil)
}

// forceReleaseChecked is forceRelease; with checked non-nil, tied to that
// ETag ("" = missing), see ForceReleaseIfUnchanged.
func forceReleaseChecked(ctx context.Context, repo Repository, id int, atLeast Version, taskID string, nonce func() string, checked *string) (Version, error) {
	rec, err := repo.Get(ctx, id)
	missing := errors.Is(err, ErrNotFound)
	if err != nil && !missing && !errors.Is(err, ErrCorruptLease) {
		return 0, err
	}
	if checked != nil && (missing != (*checked == "") || (!missing && rec.ETag != *checked)) {
		return 0, fmt.Errorf("node %d: %w", id, ErrChanged)
	}
	listing, lerr := repo.List(ctx)
	if lerr != nil {
		return 0, lerr
	}
	s := surveyLeases(ctx, repo, listing, 0)
	if err := s.unreadExcept(id); err != nil {
		// Released below a version an unread lease records, the ID's next
		// holder could repeat it.
		return 0, fmt.Errorf("cannot learn the versions every lease records, so nothing was written; try again: %w", err)
	}
	v := max(s.known[id], atLeast)
	if err == nil {
		v = max(v, rec.Lease.Instance.Version)
	} else if atLeast == 0 {
		what := "missing"
		if !missing {
			what = "corrupt"
		}
		return 0, fmt.Errorf("%w: the object of node %d is %s, and what the peers know may be older than its last holder's version; give the version explicitly", ErrVersionUnknown, id, what)
	}
	if err == nil && rec.Lease.Legacy {
		v = aboveLegacy(v, 0)
	}
	released := Lease{
		Writer:     taskID,
		Instance:   NodeInstance{ID: id, Version: v},
		Expires:    time.Now(),
		Nonce:      nonce(),
		Acquirable: err != nil || rec.Lease.Acquirable,
		Forced:     true,
	}
	if missing {
		_, err = repo.Create(ctx, released)
	} else {
		_, err = repo.Write(ctx, released, rec.ETag)
	}
	if checked != nil && isLostRace(err) {
		return 0, fmt.Errorf("node %d: %w: %w", id, ErrChanged, err)
	}
	if err != nil {
		return 0, err
	}
	if h, ok := repo.(ReleaseHintRepository); ok {
		// Waiting tasks take it at their next poll, not their next
		// listing; a failed hint only delays them until that listing.
		_ = h.SignalRelease(ctx)
	}
	return v, nil
}
