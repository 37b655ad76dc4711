package nodeid

import "time"

// The two rules by which a candidate may judge another task's lease expired.
// Neither compares the holder's wall clock with ours; see docs/design.md.

// ServerClockGranularity is the resolution of S3's Date and Last-Modified.
const ServerClockGranularity = time.Second

// ExpiredByServerClock applies rule 1. Both times come from the storage
// server: lastModified is when the holder's last write landed, truncated to
// the second, and serverDate when the answer we read was produced, also
// truncated. The holder sent that write at s <= lastModified + 1s, and our
// answer was produced at r >= serverDate, so serverDate - lastModified >=
// lease + 1s implies r - s > lease: the holder's validity (s + lease -
// margin) ended before we read the object.
func ExpiredByServerClock(lastModified, serverDate time.Time, lease time.Duration) bool {
	if lastModified.IsZero() || serverDate.IsZero() {
		return false
	}
	return serverDate.Sub(lastModified) >= lease+ServerClockGranularity
}

// UntilExpiredByServerClock is how long after serverDate rule 1
// (ExpiredByServerClock) frees a lease last written at lastModified: zero
// once it holds; false if either time is unknown.
func UntilExpiredByServerClock(lastModified, serverDate time.Time, lease time.Duration) (time.Duration, bool) {
	if lastModified.IsZero() || serverDate.IsZero() {
		return 0, false
	}
	return max(lastModified.Add(lease+ServerClockGranularity).Sub(serverDate), 0), true
}

// observations implements rule 2, local observation: for each node ID the
// ETag we last saw and the moment (our monotonic clock) the answer that first
// showed it ARRIVED. The write behind that ETag landed before then, so if
// the ETag is unchanged a whole lease duration later, the holder's validity
// has ended. It needs no trust in any clock but our own.
type observations map[int]observation

type observation struct {
	etag    string
	arrived time.Time
}

// see records that an answer arriving at arrived showed etag for id.
func (o observations) see(id int, etag string, arrived time.Time) {
	if cur, ok := o[id]; ok && cur.etag == etag {
		return
	}
	o[id] = observation{etag: etag, arrived: arrived}
}

// unchangedFor returns how long id has shown etag, as of now; 0 if we have
// not seen that ETag before.
func (o observations) unchangedFor(id int, etag string, now time.Time) time.Duration {
	cur, ok := o[id]
	if !ok || cur.etag != etag {
		return 0
	}
	return now.Sub(cur.arrived)
}

// maxClaimedDuration bounds ClaimedDuration: a timestamp years ahead (a
// broken clock) must not block a node ID for years.
const maxClaimedDuration = time.Hour

// ClaimedDuration is the lease duration a held lease of another tool claims
// (Camunda's provider writes no duration, only an expiry timestamp by its
// own clock): the timestamp less the object's Last-Modified (server clock),
// plus the second Last-Modified drops. It compares two machines' clocks, so
// it may only ever lengthen a wait, never shorten one: waiters use the
// largest of it, their own duration and the cluster's. With synchronised
// clocks it is the holder's real duration, so a task with a shorter lease
// does not take a live Camunda lease between two of its renewals.
func (rec Record) ClaimedDuration() time.Duration {
	l := rec.Lease
	if !l.Foreign() || rec.LastModified.IsZero() || l.Expires.IsZero() {
		return 0
	}
	d := l.Expires.Sub(rec.LastModified) + ServerClockGranularity
	return min(max(d, 0), maxClaimedDuration)
}
