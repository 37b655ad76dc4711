package nodeid

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"time"
)

// Initialize creates the lease objects 0..size-1 that do not exist yet, and
// the cluster marker. It is idempotent and safe when many tasks run it at
// once: each create is conditional (If-None-Match: *), and a 412 means
// another task made it.
//
// Only a fresh cluster gets missing objects as never-held leases that can be
// taken at once: no cluster marker, and every object present a never-held
// one. Once the marker exists, a missing object was deleted from outside
// (or is new through a scale-up, which cannot be told apart): its last
// holder may still be alive and writing, so it is recreated as a held lease
// of an unknown holder, with the highest version any peer knows and the
// longest lease duration any peer uses. Candidates then wait a whole lease
// duration, as after a crash, and no known version is handed out twice.
func Initialize(ctx context.Context, repo Repository, size int, taskID string, leaseDuration time.Duration) error {
	if size < 1 {
		return fmt.Errorf("%w: cluster size %d, must be >= 1", ErrInvalidConfig, size)
	}
	listing, err := repo.List(ctx)
	if err != nil {
		return err
	}
	_, err = initializeFrom(ctx, repo, listing, size, taskID, leaseDuration, newNonce, nil)
	return err
}

// initializeFrom creates what listing lacks of 0..size-1, then the cluster
// marker if the listing did not show it. Each task starts at its own offset;
// when a create finds the object made by someone else, it lists again, so
// tasks that bootstrap together share the work instead of each trying every
// ID.
func initializeFrom(ctx context.Context, repo Repository, listing Listing, size int, taskID string, leaseDuration time.Duration, nonce func() string, wait func(context.Context) bool) (bootstrap, error) {
	b := bootstrap{listing: listing}
	missing := missingIDs(listing, size)
	if len(missing) == 0 && listing.MarkerSeen {
		return b, nil
	}
	var created []Record
	fresh := false
	defer func() {
		// A never-held object we created counts only if the marker, once
		// another task created it, names it (see unfreshen).
		if fresh && b.marker == nil && b.listing.MarkerSeen {
			b.created = unfreshen(ctx, repo, b.created, taskID, leaseDuration, nonce)
		}
	}()
	if len(missing) > 0 {
		// Without a marker the cluster is fresh only if every object there
		// is a never-held one; an empty listing of a bucket without a marker
		// is the only state that needs no reading.
		noMarker := rulesOf(repo).mayCreateFresh(listing.MarkerSeen)
		s := survey{known: VersionMappings{}, fresh: noMarker, duration: leaseDuration}
		if len(listing.Slots) > 0 {
			s = surveyLeases(ctx, repo, listing, leaseDuration)
			s.fresh = s.fresh && noMarker
		}
		var err error
		var listed bool
		fresh = s.fresh
		listing, created, listed, err = createMissing(ctx, repo, listing, missing, size, taskID, s, nonce, wait)
		b.listing, b.created = listing, created
		if err != nil {
			return b, err
		}
		if !listing.MarkerSeen && !listed {
			// Others may have created objects meanwhile, or the marker:
			// look again before deciding to create it.
			if again, err := repo.List(ctx); err == nil {
				listing = mergeCreated(again, created)
				b.listing = listing
			}
		}
	}
	if listing.MarkerSeen || len(missingIDs(listing, size)) > 0 {
		return b, nil
	}
	// Every object exists and no marker was seen: record the ETags of this
	// moment. Whatever they name is checked by content when taken: only a
	// never-held object whose ETag is listed here may be taken at once. In a
	// cluster that is not fresh (one from before the marker) the list names
	// held or released objects, which that check ignores.
	//
	// A slot whose size is not that of a released body is held: the cluster
	// has run (its marker was deleted, or it predates markers), and the
	// marker then names nothing, so a never-held object recreated after an
	// outside delete cannot pass for a bootstrap one.
	m := ClusterMarker{Bootstrap: map[int]string{}, CreatedBy: taskID, ClusterSize: size, LeaseDuration: leaseDuration}
	ran := slices.ContainsFunc(listing.Slots, func(s Slot) bool { return !sizeSuggestsReleased(s.Size) })
	for _, s := range listing.Slots {
		if s.ID < size && !ran {
			m.Bootstrap[s.ID] = s.ETag
		}
	}
	err := repo.CreateMarker(ctx, m)
	switch {
	case err == nil:
		b.marker = &m
	case !isLostRace(err):
		return b, fmt.Errorf("create cluster marker: %w", err)
	}
	b.listing.MarkerSeen = true
	return b, nil
}

// unfreshen checks the never-held objects this task created, thinking the
// cluster fresh, against the cluster marker another task created, and
// rewrites each one the marker does not name as an expiring lease of an
// unknown holder, at the highest version any lease records. The listing
// that made the cluster look fresh may have been out of date (the task was
// paused after it, or it was stale): the marker existed, the object had been
// held and was deleted from outside, and a never-held object there would
// restart its version, and would be taken at once by Camunda's provider,
// which reads it as free. The marker's creator listed every object before
// creating it, so in a true cold start it names ours. It returns created
// with the rewritten records replaced; one that cannot be rewritten (another
// write got there first) is dropped, to be read again.
func unfreshen(ctx context.Context, repo Repository, created []Record, taskID string, leaseDuration time.Duration, nonce func() string) []Record {
	var suspect []int
	for i, rec := range created {
		if !rec.Lease.Held() {
			suspect = append(suspect, i)
		}
	}
	if len(suspect) == 0 {
		return created
	}
	m, err := repo.Marker(ctx)
	if err != nil {
		m = ClusterMarker{} // unreadable: it proves nothing
	}
	var stale []int
	for _, i := range suspect {
		if m.Bootstrap == nil || m.Bootstrap[created[i].ID] != created[i].ETag {
			stale = append(stale, i)
		}
	}
	if len(stale) == 0 {
		return created
	}
	s := survey{known: VersionMappings{}, duration: leaseDuration}
	if listing, err := repo.List(ctx); err == nil {
		s = surveyLeases(ctx, repo, listing, leaseDuration)
	}
	out := slices.Clone(created)
	drop := map[int]bool{}
	for _, i := range stale {
		rec := created[i]
		l := Lease{
			TaskID:        recreatedPrefix + taskID,
			Instance:      NodeInstance{ID: rec.ID, Version: max(s.known[rec.ID], 1)},
			Expires:       time.Now().Add(s.duration),
			Duration:      s.duration,
			Nonce:         nonce(),
			KnownVersions: s.known.Clone(),
			Acquirable:    true,
		}
		etag, err := repo.Write(ctx, l, rec.ETag)
		if err != nil {
			drop[i] = true
			continue
		}
		body, _ := l.Encode()
		out[i] = Record{Slot: Slot{ID: rec.ID, ETag: etag, Size: int64(len(body))}, Lease: l}
	}
	kept := out[:0]
	for i, rec := range out {
		if !drop[i] {
			kept = append(kept, rec)
		}
	}
	return kept
}

// bootstrap is what initializeFrom leaves: the freshest listing it has, with
// the objects it created added; those objects as records (their content is
// known, so an acquisition need not read them back); and the cluster marker
// if it created it.
type bootstrap struct {
	listing Listing
	created []Record
	marker  *ClusterMarker
}

// recreatedPrefix starts the task ID of a lease recreated after an outside
// delete: it stands for an unknown holder, not for a tenure of that task.
const recreatedPrefix = "recreated-by:"

// createMissing creates the objects of missing: never-held leases if s says
// the cluster is fresh, otherwise expiring leases of an unknown holder. It
// reports whether the listing it returns comes from a LIST sent after its
// last create.
//
// A task starts at its own offset and goes on in ID order while its creates
// succeed. After a 412 it lists again and goes on from a missing ID picked by
// its task ID and the number of lists: tasks that all went on from their own
// offsets would run into each other's objects again and again.
//
// With wait set (an acquisition), a task whose relist shows that others
// created more of its missing objects since its last look than are still
// missing lets them finish instead of racing them for the last ones: wait
// reads the cluster marker for a while and reports whether it exists (then
// every object did when it was made, and nothing is left to create). Else the
// task lists again, and goes on creating once the others stop gaining. This
// only delays creates; what a create writes is decided as before.
func createMissing(ctx context.Context, repo Repository, listing Listing, missing []int, size int, taskID string, s survey, nonce func() string, wait func(context.Context) bool) (Listing, []Record, bool, error) {
	start := func(offset int) {
		sort.Slice(missing, func(i, j int) bool {
			return (missing[i]-offset+size)%size < (missing[j]-offset+size)%size
		})
	}
	start(int(taskHash(taskID) % uint32(size)))
	var created []Record
	listed := false
	relist := func() (int, error) {
		again, err := repo.List(ctx)
		if err != nil {
			return 0, err
		}
		listing, listed = mergeCreated(again, created), true
		still := missingIDs(listing, size)
		before := len(missing)
		keep := missing[:0]
		for _, m := range missing {
			if slices.Contains(still, m) {
				keep = append(keep, m)
			}
		}
		missing = keep
		return before - len(missing), nil
	}
	for lists := 1; len(missing) > 0; {
		id := missing[0]
		missing = missing[1:]
		listed = false
		l := Lease{
			Writer:     taskID,
			Instance:   NodeInstance{ID: id},
			Expires:    time.Now(),
			Duration:   s.duration,
			Nonce:      nonce(),
			Acquirable: true,
		}
		if !s.fresh {
			l.TaskID = recreatedPrefix + taskID
			l.Writer = ""
			l.Instance.Version = max(s.known[id], 1)
			l.Expires = time.Now().Add(s.duration)
			l.KnownVersions = s.known.Clone()
		}
		etag, err := repo.Create(ctx, l)
		switch {
		case err == nil:
			body, _ := l.Encode()
			rec := Record{Slot: Slot{ID: id, ETag: etag, Size: int64(len(body))}, Lease: l}
			created = append(created, rec)
			listing.Slots = append(listing.Slots, rec.Slot)
		case isLostRace(err):
			grown, lerr := relist()
			if lerr != nil {
				return listing, created, false, lerr
			}
			for wait != nil && len(missing) > 0 && grown >= len(missing) {
				if wait(ctx) {
					listing.MarkerSeen = true
					return listing, created, listed, nil
				}
				if grown, lerr = relist(); lerr != nil {
					return listing, created, false, lerr
				}
			}
			if len(missing) > 0 {
				start(missing[int(taskHash(fmt.Sprint(taskID, "/", lists))%uint32(len(missing)))])
				lists++
			}
		default:
			return listing, created, false, fmt.Errorf("initialize node %d: %w", id, err)
		}
	}
	return mergeCreated(listing, nil), created, listed, nil
}

// mergeCreated adds the slots of objects we created to a listing that may
// not show them yet, keeping the slots in ID order without duplicates.
func mergeCreated(l Listing, created []Record) Listing {
	slots := slices.Clone(l.Slots)
	for _, c := range created {
		if !slices.ContainsFunc(slots, func(s Slot) bool { return s.ID == c.ID }) {
			slots = append(slots, c.Slot)
		}
	}
	sort.SliceStable(slots, func(i, j int) bool { return slots[i].ID < slots[j].ID })
	l.Slots = slices.CompactFunc(slots, func(a, b Slot) bool { return a.ID == b.ID })
	return l
}

func taskHash(taskID string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(taskID))
	return h.Sum32()
}

func missingIDs(l Listing, size int) []int {
	present := make(map[int]bool, len(l.Slots))
	for _, s := range l.Slots {
		present[s.ID] = true
	}
	var missing []int
	for id := 0; id < size; id++ {
		if !present[id] {
			missing = append(missing, id)
		}
	}
	return missing
}
