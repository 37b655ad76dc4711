package nodeid

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Scale changes the cluster size. Growing creates the new objects (and makes
// earlier removed ones acquirable again); shrinking marks the objects at and
// above size unusable. Objects are never deleted: a recreated object would
// restart the version at 0 and collide with existing data directories.
//
// Every mark writes a fresh nonce, held or released: a holder's next renewal
// fails with 412 and the holder fences itself, and a candidate that read a
// released object before the scale-down cannot take it afterwards.
func Scale(ctx context.Context, repo Repository, size int, taskID string, leaseDuration time.Duration) error {
	return scale(ctx, repo, size, taskID, leaseDuration, newNonce)
}

// ScaleIfUnchanged is Scale for a caller that judged the objects first (an
// operator's guard): it writes over an object only if its ETag is still the
// one in checked (by node ID), and otherwise stops with ErrChanged (wrapped
// with the node ID), so a holder that took an ID after the check is never
// fenced on the strength of that check. An object that needs no change is
// not written and not compared. Missing objects below size are created with
// If-None-Match as by Scale.
func ScaleIfUnchanged(ctx context.Context, repo Repository, size int, taskID string, leaseDuration time.Duration, checked map[int]string) error {
	if checked == nil {
		checked = map[int]string{}
	}
	return scaleChecked(ctx, repo, size, taskID, leaseDuration, newNonce, checked)
}

func scale(ctx context.Context, repo Repository, size int, taskID string, leaseDuration time.Duration, nonce func() string) error {
	return scaleChecked(ctx, repo, size, taskID, leaseDuration, nonce, nil)
}

// scaleChecked is scale; with checked non-nil, each write is tied to the
// ETag the caller checked (see ScaleIfUnchanged).
func scaleChecked(ctx context.Context, repo Repository, size int, taskID string, leaseDuration time.Duration, nonce func() string, checked map[int]string) error {
	if size < 1 {
		return fmt.Errorf("%w: cluster size %d, must be >= 1", ErrInvalidConfig, size)
	}
	listing, err := repo.List(ctx)
	if err != nil {
		return err
	}
	if _, err := initializeFrom(ctx, repo, listing, size, taskID, leaseDuration, nonce, nil); err != nil {
		return err
	}
	listing, err = repo.List(ctx)
	if err != nil {
		return err
	}
	known := surveyLeases(ctx, repo, listing, 0).known
	for _, s := range listing.Slots {
		want := s.ID < size
		for attempt := 0; ; attempt++ {
			err := setAcquirable(ctx, repo, s.ID, want, taskID, nonce, known, checked)
			if err == nil || errors.Is(err, ErrCorruptLease) {
				break
			}
			if errors.Is(err, ErrChanged) {
				return fmt.Errorf("scale node %d: %w", s.ID, err)
			}
			if isLostRace(err) && attempt < 10 {
				continue // renewed under us: read again
			}
			return fmt.Errorf("scale node %d: %w", s.ID, err)
		}
	}
	if h, ok := repo.(ReleaseHintRepository); ok {
		// IDs made acquirable again are taken at waiting tasks' next poll.
		_ = h.SignalRelease(ctx)
	}
	return nil
}

func setAcquirable(ctx context.Context, repo Repository, id int, acquirable bool, taskID string, nonce func() string, known VersionMappings, checked map[int]string) error {
	rec, err := repo.Get(ctx, id)
	if err != nil {
		return err
	}
	if rec.Lease.Acquirable == acquirable {
		return nil
	}
	if checked != nil {
		if etag, ok := checked[id]; !ok || etag != rec.ETag {
			return ErrChanged
		}
	}
	l := rec.Lease
	l.Acquirable = acquirable
	if rulesOf(repo).markRenewsBody(l) {
		l.Nonce = nonce()
		if !l.Held() {
			// A legacy release written back in this format must not start
			// to count as graceful.
			l.Forced = l.Forced || l.Legacy
			if l.Legacy {
				l.Instance.Version = aboveLegacy(l.Instance.Version, known[id])
			}
			l.Writer, l.Expires, l.Legacy = taskID, time.Now(), false
		} else {
			l.Writer = taskID // the holder did not write this: Placeholder
		}
	}
	_, err = repo.Write(ctx, l, rec.ETag)
	if checked != nil && isLostRace(err) {
		return fmt.Errorf("%w: %w", ErrChanged, err)
	}
	return err
}
