package nodeid

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
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

// Initialize creates the lease objects 0..size-1 that do not exist yet. It is
// idempotent and safe when many tasks run it at once: each create is
// conditional (If-None-Match: *), and a 412 means another task made it.
//
// Only a fresh cluster (no object ever held) gets missing objects as
// released leases that can be taken at once. Once the cluster has run, a
// missing object was deleted from outside (or is new through a scale-up,
// which cannot be told apart): its last holder may still be alive and
// writing, so it is recreated as a held lease of an unknown holder, with the
// highest version any peer knows. Candidates then wait a whole lease
// duration, as after a crash, and no known version is handed out twice.
func Initialize(ctx context.Context, repo Repository, size int, taskID string, leaseDuration time.Duration) error {
	if size < 1 {
		return fmt.Errorf("%w: cluster size %d, must be >= 1", ErrInvalidConfig, size)
	}
	listing, err := repo.List(ctx)
	if err != nil {
		return err
	}
	_, _, err = initializeFrom(ctx, repo, listing, size, taskID, leaseDuration)
	return err
}

// initializeFrom creates what listing lacks of 0..size-1. Each task starts
// at its own offset; when a create finds the object made by someone else, it
// lists again, so tasks that bootstrap together share the work instead of
// each trying every ID. It returns the freshest listing it has, with the
// objects it created added, and those objects as records: their content is
// known, so an acquisition need not read them back.
func initializeFrom(ctx context.Context, repo Repository, listing Listing, size int, taskID string, leaseDuration time.Duration) (Listing, []Record, error) {
	missing := missingIDs(listing, size)
	if len(missing) == 0 {
		return listing, nil, nil
	}
	known, fresh := VersionMappings{}, true
	if len(listing.Slots) > 0 {
		known, fresh = knownVersions(ctx, repo, listing)
	}
	offset := int(taskHash(taskID) % uint32(size))
	sort.Slice(missing, func(i, j int) bool {
		return (missing[i]-offset+size)%size < (missing[j]-offset+size)%size
	})
	var created []Record
	for len(missing) > 0 {
		id := missing[0]
		missing = missing[1:]
		l := Lease{Instance: NodeInstance{ID: id}, Acquirable: true}
		if !fresh {
			l = Lease{
				TaskID:     "recreated-by:" + taskID,
				Instance:   NodeInstance{ID: id, Version: max(known[id], 1)},
				Expires:    time.Now().Add(leaseDuration),
				Duration:   leaseDuration,
				Nonce:      newNonce(),
				Acquirable: true,
			}
		}
		etag, err := repo.Create(ctx, l)
		switch {
		case err == nil:
			body, _ := l.Encode()
			rec := Record{Slot: Slot{ID: id, ETag: etag, Size: int64(len(body))}, Lease: l}
			created = append(created, rec)
			listing.Slots = append(listing.Slots, rec.Slot)
		case errors.Is(err, ErrPreconditionFailed) || errors.Is(err, ErrConflict):
			again, lerr := repo.List(ctx)
			if lerr != nil {
				return listing, created, lerr
			}
			listing = again
			still := missingIDs(again, size)
			keep := missing[:0]
			for _, m := range missing {
				if slices.Contains(still, m) {
					keep = append(keep, m)
				}
			}
			missing = keep
		default:
			return listing, created, fmt.Errorf("initialize node %d: %w", id, err)
		}
	}
	// Objects we created after our last listing are in it already; keep
	// the slots in ID order, without duplicates.
	sort.SliceStable(listing.Slots, func(i, j int) bool { return listing.Slots[i].ID < listing.Slots[j].ID })
	listing.Slots = slices.CompactFunc(listing.Slots, func(a, b Slot) bool { return a.ID == b.ID })
	return listing, created, nil
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
// Marking a held lease writes a fresh nonce, so its holder's next renewal
// fails with 412 and the holder fences itself.
func Scale(ctx context.Context, repo Repository, size int, taskID string, leaseDuration time.Duration) error {
	if size < 1 {
		return fmt.Errorf("%w: cluster size %d, must be >= 1", ErrInvalidConfig, size)
	}
	if err := Initialize(ctx, repo, size, taskID, leaseDuration); err != nil {
		return err
	}
	listing, err := repo.List(ctx)
	if err != nil {
		return err
	}
	for _, s := range listing.Slots {
		want := s.ID < size
		for attempt := 0; ; attempt++ {
			err := setAcquirable(ctx, repo, s.ID, want)
			if err == nil || errors.Is(err, ErrCorruptLease) {
				break
			}
			if (errors.Is(err, ErrPreconditionFailed) || errors.Is(err, ErrConflict)) && attempt < 10 {
				continue // renewed under us: read again
			}
			return fmt.Errorf("scale node %d: %w", s.ID, err)
		}
	}
	return nil
}

func setAcquirable(ctx context.Context, repo Repository, id int, acquirable bool) error {
	rec, err := repo.Get(ctx, id)
	if err != nil {
		return err
	}
	if rec.Lease.Acquirable == acquirable {
		return nil
	}
	l := rec.Lease
	l.Acquirable = acquirable
	if l.Held() {
		l.Nonce = newNonce()
	}
	_, err = repo.Write(ctx, l, rec.ETag)
	return err
}

// ForceRelease releases node id whoever holds it, for operators. The version
// is kept. The holder, if alive, fails its next renewal and fences itself,
// but it may still act until its self-fence deadline: the successor sees a
// released lease and would hard-link every file, so only use this when the
// holder is known to be dead.
func ForceRelease(ctx context.Context, repo Repository, id int) (Version, error) {
	rec, err := repo.Get(ctx, id)
	if err != nil && !errors.Is(err, ErrCorruptLease) {
		return 0, err
	}
	v := rec.Lease.Instance.Version
	if errors.Is(err, ErrCorruptLease) {
		// The version of a corrupt object is unknown: keep the largest any
		// peer knows, so no version is handed out twice.
		listing, lerr := repo.List(ctx)
		if lerr != nil {
			return 0, lerr
		}
		known, _ := knownVersions(ctx, repo, listing)
		v = known[id]
	}
	released := Lease{Instance: NodeInstance{ID: id, Version: v}, Acquirable: rec.Lease.Acquirable || errors.Is(err, ErrCorruptLease)}
	if _, err := repo.Write(ctx, released, rec.ETag); err != nil {
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

// knownVersions merges the versions that all readable leases know of, their
// own included, and reports whether the cluster is fresh: every object
// readable, released and at version 0, so no task ever held an ID.
func knownVersions(ctx context.Context, repo Repository, l Listing) (known VersionMappings, fresh bool) {
	known, fresh = VersionMappings{}, true
	for _, s := range l.Slots {
		rec, err := repo.Get(ctx, s.ID)
		if err != nil || rec.Lease.Held() || rec.Lease.Instance.Version > 0 {
			fresh = false
		}
		if err != nil {
			continue
		}
		known.Observe(s.ID, rec.Lease.Instance.Version)
		for id, v := range rec.Lease.KnownVersions {
			known.Observe(id, v)
		}
	}
	return known, fresh
}
