package nodeid

import (
	"context"
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
	// Tenures are the tenure objects the listing showed, if TenuresListed
	// (a TenureRepository that lists them with the leases).
	Tenures       []TenureObject
	TenuresListed bool
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
