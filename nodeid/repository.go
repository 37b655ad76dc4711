package nodeid

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"sort"
	"time"
)

// Repository stores the lease objects of one cluster. It is the only thing
// the protocol needs from storage: listing, reading, create-if-absent and
// compare-and-swap on the ETag. S3Repository implements it on S3; tests and
// simulations implement it in memory.
//
// Every error is a *StorageError whose kind (ErrPreconditionFailed,
// ErrNotFound, ErrConflict, ErrSlowDown, ErrAccessDenied, ErrUnavailable) is
// checked with errors.Is.
type Repository interface {
	// List returns every lease object of the cluster, with ETags, in one
	// listing (paginated as the store requires).
	List(ctx context.Context) (Listing, error)
	// Get reads the lease object of node id. When the object exists but is
	// not a valid lease, the Record's Slot is filled and the error wraps
	// ErrCorruptLease.
	Get(ctx context.Context, id int) (Record, error)
	// Create writes l only if its object does not exist (If-None-Match: *)
	// and returns the new ETag.
	Create(ctx context.Context, l Lease) (string, error)
	// Write replaces the object of l.Instance.ID only if its ETag is still
	// etag (If-Match) and returns the new ETag. Acquisition, renewal,
	// release and marking unusable are all writes.
	Write(ctx context.Context, l Lease, etag string) (string, error)
	// Marker reads the cluster marker (ErrNotFound when there is none).
	Marker(ctx context.Context) (ClusterMarker, error)
	// CreateMarker creates the cluster marker only if it does not exist
	// (If-None-Match: *).
	CreateMarker(ctx context.Context, m ClusterMarker) error
}

// Slot is what a listing shows of one lease object without reading it.
type Slot struct {
	ID           int
	ETag         string
	LastModified time.Time // server clock, whole seconds on S3
	Size         int64     // 0 for a released or never-held lease
}

// Listing is the result of Repository.List.
type Listing struct {
	Slots []Slot // ascending by ID
	// ServerDate is the Date header of the first answer: the server's clock,
	// no later than the moment any slot in the listing was read.
	ServerDate time.Time
	// MarkerSeen reports that the cluster marker was in the listing. A
	// listing may be stale, so its absence is only a reason to look again.
	MarkerSeen bool
}

// Slot returns the slot of id.
func (l Listing) Slot(id int) (Slot, bool) {
	for _, s := range l.Slots {
		if s.ID == id {
			return s, true
		}
	}
	return Slot{}, false
}

// Record is one lease object read whole.
type Record struct {
	Slot
	Lease Lease
	// ServerDate is the Date header of the answer (server clock).
	ServerDate time.Time
}

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
		}
	}
	_, err = repo.Write(ctx, l, rec.ETag)
	if checked != nil && isLostRace(err) {
		return fmt.Errorf("%w: %w", ErrChanged, err)
	}
	return err
}

// aboveLegacy is the version to write over a legacy (empty) object read at
// version v, with known the highest version any lease records for it. Every
// empty body has one ETag, so the If-Match also lands on a later empty state:
// after a whole tenure of a writer of empty bodies (Camunda's provider) that
// took v+1 and released. Writing the version kept would lower the object,
// and the next taker would hand out v+1 again; one above every version known
// keeps it from going down after one such tenure (docs/design.md, "Mixed
// operation with Camunda 8.9").
func aboveLegacy(v, known Version) Version {
	return min(max(v, known)+1, MaxVersion)
}

// ErrVersionUnknown is returned by ForceRelease when the object of the node
// is missing or corrupt, no peer knows its version and none was given:
// releasing at a guess could hand out a version twice.
var ErrVersionUnknown = errors.New("the version of the node is unknown")

// ForceRelease releases node id whoever holds it, for operators, and returns
// the version it was released at. The version never goes down: it is the
// largest of the object's, any peer's knowledge and atLeast (the operator's
// word, e.g. the newest version in the data root; 0 if not known). With a
// missing or corrupt object and nothing else that knows the version,
// atLeast is required (ErrVersionUnknown).
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
	} else if v == 0 {
		what := "missing"
		if !missing {
			what = "corrupt"
		}
		return 0, fmt.Errorf("%w: the object of node %d is %s and no peer knows its version; give the version explicitly", ErrVersionUnknown, id, what)
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
	return v, nil
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
