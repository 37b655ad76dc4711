package nodeid

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// survey is what the readable leases of a listing tell together.
type survey struct {
	known    VersionMappings // the highest version of each node anyone knows
	duration time.Duration   // the longest lease duration in use, at least ours
	// fresh: every object is a readable never-held lease of this format.
	// A legacy (empty) object proves nothing: every one has the same ETag.
	fresh bool
	// unread holds, per node ID, the failure to read an object the listing
	// showed (no answer, 503, a timeout, or 404: deleted, perhaps only for
	// a moment before its holder restores it): that object may record a
	// version nothing else does, so a version chosen without it may repeat
	// one. A corrupt object records nothing anyone can read and stays
	// corrupt until repaired; it does not count.
	unread map[int]error
}

// unreadExcept returns the first read failure of an ID other than skip,
// or nil.
func (s survey) unreadExcept(skip int) error {
	ids := slices.Sorted(maps.Keys(s.unread))
	for _, id := range ids {
		if id != skip {
			return fmt.Errorf("read the lease of node %d: %w", id, s.unread[id])
		}
	}
	return nil
}

// surveyLeases reads every lease of the listing.
func surveyLeases(ctx context.Context, repo Repository, l Listing, ours time.Duration) survey {
	s := survey{known: VersionMappings{}, fresh: true, duration: ours}
	for _, slot := range l.Slots {
		rec, err := repo.Get(ctx, slot.ID)
		if err != nil || rec.Lease.Held() || rec.Lease.Instance.Version > 0 || rec.Lease.Legacy {
			s.fresh = false
		}
		if err != nil {
			if !errors.Is(err, ErrCorruptLease) {
				if s.unread == nil {
					s.unread = map[int]error{}
				}
				s.unread[slot.ID] = err
			}
			continue
		}
		s.duration = max(s.duration, rec.Lease.Duration)
		s.known.Observe(slot.ID, rec.Lease.Instance.Version)
		for id, v := range rec.Lease.KnownVersions {
			s.known.Observe(id, v)
		}
	}
	return s
}
