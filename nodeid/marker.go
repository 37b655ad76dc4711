package nodeid

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// MarkerKeyName is the name of the cluster marker object beside the leases,
// <prefix>node-ids-initialized (the name Camunda's provider uses too). It is
// created once, with If-None-Match: *, when every lease object of a fresh
// cluster exists, and never written again.
//
// The marker is the only proof that a cluster is fresh. Before this project
// had it, a cluster was judged fresh when its listing was empty or showed
// only never-held objects; an object deleted while held then looked exactly
// like one never created, was recreated as free, and a second task took the
// ID while the first still held it. With the marker, absence proves nothing:
// once it exists, a missing lease object is recreated as an expiring lease
// of an unknown holder at the highest version any peer knows.
const MarkerKeyName = "node-ids-initialized"

// MarkerKey is the key of the cluster marker under prefix.
func MarkerKey(prefix string) string { return prefix + MarkerKeyName }

// ClusterMarker is the content of the cluster marker.
type ClusterMarker struct {
	// Bootstrap holds, per node ID, the ETag of the never-held object that
	// existed when the marker was created. A never-held lease may be taken at
	// once only while its object still has that ETag: bodies are unique, so
	// the ETag names that one write, and a never-held object created later
	// (by a task that judged the cluster fresh from a stale view, after an
	// outside delete) is not in the list and is treated as an expiring lease.
	Bootstrap map[int]string
	// CreatedBy is the task that created the marker. Informational.
	CreatedBy string
	// ClusterSize is the size the cluster was bootstrapped with.
	ClusterSize int
	// LeaseDuration is the cluster's lease duration, from the task that
	// created the marker (0 if unknown: an older or foreign marker). An
	// object overwritten or recreated by someone else no longer records its
	// holder's duration; waiters use this one as a floor, and a task with a
	// longer one refuses to acquire.
	LeaseDuration time.Duration
	// LastModified is the server's time of the marker's creation (read only).
	LastModified time.Time
}

// markerBody is the JSON form. An empty body (Camunda's marker) is a marker
// without bootstrap ETags: it proves the cluster was initialized, and no
// never-held object is provably fresh.
type markerBody struct {
	BootstrapETags  map[string]string `json:"bootstrapETags"`
	CreatedBy       string            `json:"createdBy,omitempty"`
	ClusterSize     int               `json:"clusterSize,omitempty"`
	LeaseDurationMs int64             `json:"leaseDurationMs,omitempty"`
}

// Encode returns the body of the marker object.
func (m ClusterMarker) Encode() []byte {
	w := markerBody{BootstrapETags: map[string]string{}, CreatedBy: m.CreatedBy, ClusterSize: m.ClusterSize, LeaseDurationMs: m.LeaseDuration.Milliseconds()}
	for id, etag := range m.Bootstrap {
		w.BootstrapETags[strconv.Itoa(id)] = etag
	}
	b, err := json.Marshal(w)
	if err != nil {
		panic(fmt.Sprintf("nodeid: encode marker: %v", err)) // strings only: cannot fail
	}
	return b
}

// DecodeMarker parses a marker body. Unknown fields are ignored (a newer
// writer may add some); a body that is not JSON is ErrCorruptLease.
func DecodeMarker(body []byte) (ClusterMarker, error) {
	m := ClusterMarker{Bootstrap: map[int]string{}}
	if len(bytes.TrimSpace(body)) == 0 {
		return m, nil
	}
	if len(body) > MaxLeaseBodySize {
		return ClusterMarker{}, fmt.Errorf("%w: cluster marker of %d bytes", ErrCorruptLease, len(body))
	}
	var w markerBody
	if err := json.Unmarshal(body, &w); err != nil {
		return ClusterMarker{}, fmt.Errorf("%w: cluster marker: %v", ErrCorruptLease, err)
	}
	for k, etag := range w.BootstrapETags {
		id, err := parseNodeID(k)
		if err != nil || etag == "" {
			return ClusterMarker{}, fmt.Errorf("%w: cluster marker: bootstrap entry %q=%q", ErrCorruptLease, k, etag)
		}
		m.Bootstrap[id] = etag
	}
	if w.LeaseDurationMs < 0 {
		return ClusterMarker{}, fmt.Errorf("%w: cluster marker: negative leaseDurationMs", ErrCorruptLease)
	}
	m.CreatedBy, m.ClusterSize = w.CreatedBy, w.ClusterSize
	m.LeaseDuration = time.Duration(w.LeaseDurationMs) * time.Millisecond
	return m, nil
}

// provesFresh reports whether rec is the never-held object the marker
// recorded at bootstrap, unchanged since: no task can have held the ID. The
// object must also be no newer than the marker (server clock), which keeps a
// duplicated bootstrap request that lands again after an outside delete from
// passing for the original unless all of it happens within one second.
func (m ClusterMarker) provesFresh(rec Record) bool {
	l := rec.Lease
	if l.Held() || l.Legacy || l.Instance.Version != 0 || m.Bootstrap == nil {
		return false
	}
	etag, ok := m.Bootstrap[rec.ID]
	if !ok || etag != rec.ETag {
		return false
	}
	// Both times must be the server's: an unknown one proves nothing. They
	// are compared in whole seconds, S3's resolution: some servers give
	// milliseconds in listings but whole seconds in a GET's header.
	if rec.LastModified.IsZero() || m.LastModified.IsZero() {
		return false
	}
	return !rec.LastModified.Truncate(ServerClockGranularity).After(m.LastModified.Truncate(ServerClockGranularity))
}
