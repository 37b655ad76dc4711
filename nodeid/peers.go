package nodeid

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MetaAddress is the user-metadata key of a held lease's advertised address.
// It is metadata, not body, because Camunda's parser rejects unknown body
// fields; Camunda ignores it.
const MetaAddress = "address"

// maxAddressLen bounds an address: a DNS name is at most 253 bytes, a port
// and brackets add a few.
const maxAddressLen = 262

// ErrInvalidAddress is returned for an advertised address that is not a
// host or host:port.
var ErrInvalidAddress = errors.New("invalid address")

// ValidateAddress checks that s is a host or host:port: an IPv4 address, an
// IPv6 address (in brackets with a port), or a DNS name, and a port in
// 1..65535. It is where peers will connect, so it is checked before it is
// published, and again when read (a value that fails is shown as unknown).
func ValidateAddress(s string) error {
	bad := func(why string) error { return fmt.Errorf("%w %q: %s", ErrInvalidAddress, s, why) }
	if s == "" || len(s) > maxAddressLen {
		return bad("want a host or host:port")
	}
	host, port := s, ""
	if h, p, err := net.SplitHostPort(s); err == nil {
		if p == "" {
			return bad("empty port")
		}
		host, port = h, p
	} else if strings.Count(s, ":") == 1 || strings.HasPrefix(s, "[") {
		return bad(err.Error())
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return bad("port must be 1..65535")
		}
	}
	if ip := net.ParseIP(host); ip != nil {
		if ip.IsUnspecified() {
			return bad("an unspecified address cannot be reached")
		}
		return nil
	}
	if strings.Contains(host, ":") {
		return bad("an IPv6 address with a port needs brackets")
	}
	if !validHostname(host) {
		return bad("not an IP address or a DNS name")
	}
	return nil
}

// validHostname reports whether h is a DNS name: labels of letters, digits
// and hyphens, not starting or ending with a hyphen, 1..63 bytes each.
func validHostname(h string) bool {
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// PeerState is what a node ID's lease object says, as a reader judges it.
type PeerState string

// States of a Peer.
const (
	PeerHeld     PeerState = "held"     // held by a live holder, not expired by the server's clock
	PeerExpired  PeerState = "expired"  // held, but not renewed for a lease duration
	PeerReleased PeerState = "released" // released or never held
	PeerUnusable PeerState = "unusable" // scaled down
	PeerMissing  PeerState = "missing"  // no object
	PeerCorrupt  PeerState = "corrupt"  // an object that is not a lease, or names a task ID we never write
	// PeerUnknown: not read for a lease duration (S3 errors), or its
	// expiry cannot be judged (no server Date): no address is given.
	PeerUnknown PeerState = "unknown"
	// PeerNoHolder: held in name only, an expiring placeholder
	// (Lease.Placeholder). It blocks takers until it expires, but no live
	// task holds it, so no address is given.
	PeerNoHolder PeerState = "no-holder"
)

// Peer is one node ID of the cluster: its version, its holder and where to
// reach it. Address is empty unless the lease is held and live: a released
// or expired lease has no address anyone should connect to.
type Peer struct {
	ID      int       `json:"id"`
	Address string    `json:"address"`
	Version Version   `json:"version"`
	TaskID  string    `json:"holder,omitempty"`
	State   PeerState `json:"state"`
}

// LiveHolder reports whether the held lease in rec names a task that may
// still act as its holder: not a Placeholder, and its own validity not
// passed by the server's clock. A holder's validity ends L - m after it
// sent its last write, which landed before Last-Modified + 1 s, so
// Date - Last-Modified >= L + 1 s (L its own recorded duration) proves it
// over. Takers wait for the longest duration any task may have
// (ExpiredByServerClock in judge); a holder that has stopped is not live
// that long. A holder that recorded no duration (Camunda's) is live until
// that rule says expired: its timestamp is another machine's clock. Without
// Date or Last-Modified nothing is proven, and it is not live.
func (rec Record) LiveHolder() bool {
	l := rec.Lease
	if !l.Held() || l.Placeholder() || rec.ServerDate.IsZero() || rec.LastModified.IsZero() {
		return false
	}
	return l.Duration == 0 || !ExpiredByServerClock(rec.LastModified, rec.ServerDate, l.Duration)
}

// peerOf judges rec as a peer, with own the reader's lease duration and
// cluster the marker's (see HolderDuration).
func peerOf(rec Record, own, cluster time.Duration) Peer {
	l := rec.Lease
	if l.Held() && !safeTaskIDText(l.TaskID) {
		// Not written by this tool (ValidateTaskID): its task ID would
		// reach templates and env files, so nothing of it is shown.
		return Peer{ID: rec.ID, State: PeerCorrupt}
	}
	p := Peer{ID: rec.ID, Version: l.Instance.Version, TaskID: l.TaskID}
	switch {
	case !l.Acquirable:
		p.State = PeerUnusable
	case !l.Held():
		p.State = PeerReleased
	case rec.ServerDate.IsZero() || rec.LastModified.IsZero():
		// Expiry cannot be judged by the server's clock: an address that
		// may be a dead holder's is not handed out.
		p.State = PeerUnknown
	case ExpiredByServerClock(rec.LastModified, rec.ServerDate, HolderDuration(rec, own, cluster)):
		p.State = PeerExpired
	case !rec.LiveHolder():
		p.State = PeerNoHolder
	default:
		p.State = PeerHeld
		if ValidateAddress(l.Address) == nil {
			p.Address = l.Address
		}
	}
	return p
}

// ReadPeers reads every lease of the cluster (one LIST and one GET per
// object) and returns one Peer per node ID 0..size-1 and any other ID found,
// sorted by ID. lease is the reader's lease duration, for judging expiry by
// the server's clock with the cluster marker's (see HolderDuration).
func ReadPeers(ctx context.Context, repo Repository, size int, lease time.Duration) ([]Peer, error) {
	listing, err := repo.List(ctx)
	if err != nil {
		return nil, err
	}
	marker, err := repo.Marker(ctx)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	peers := map[int]Peer{}
	for _, s := range listing.Slots {
		rec, err := repo.Get(ctx, s.ID)
		switch {
		case errors.Is(err, ErrNotFound):
			peers[s.ID] = Peer{ID: s.ID, State: PeerMissing}
		case errors.Is(err, ErrCorruptLease):
			peers[s.ID] = Peer{ID: s.ID, State: PeerCorrupt}
		case err != nil:
			return nil, err
		default:
			peers[s.ID] = peerOf(rec, lease, marker.LeaseDuration)
		}
	}
	for id := range size {
		if _, ok := peers[id]; !ok {
			peers[id] = Peer{ID: id, State: PeerMissing}
		}
	}
	out := make([]Peer, 0, len(peers))
	for _, p := range peers {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Peer) int { return a.ID - b.ID })
	return out, nil
}

// Peers returns the cluster as this holder last read it: one Peer per node
// ID, sorted, its own entry included. It is read every
// MappingsRefreshInterval (default L, jittered by ±20%; R/2 until the
// holder is ready) while the lease is held, so after a takeover a peer's new
// address shows within 1.2 intervals of it landing; before the first read,
// about one interval after acquiring, it is empty (ReadPeers gives the
// table at once, at the cost of a LIST and a GET per ID). The first read is
// not made at once on purpose: in a start storm every task reading every
// lease would multiply the requests.
func (p *Provider) Peers() []Peer {
	p.peersMu.Lock()
	defer p.peersMu.Unlock()
	return slices.Clone(p.peers)
}

// PeersChanged returns a channel that is closed the next time the table
// Peers returns changes.
func (p *Provider) PeersChanged() <-chan struct{} {
	p.peersMu.Lock()
	defer p.peersMu.Unlock()
	if p.peersCh == nil {
		p.peersCh = make(chan struct{})
	}
	return p.peersCh
}

// agedPeers merges the entries read in this round (fresh) into the table:
// an entry not read again keeps its last reading for one lease duration,
// then becomes PeerUnknown without an address. A holder that died while we
// could not read its object is judged expired by the server's clock within
// L + 1 s of its last write, so an address older than L of reading may be a
// dead one's. Our own entry is what we hold.
func (p *Provider) agedPeers(fresh map[int]Peer) map[int]Peer {
	now := p.cfg.Clock.Now()
	p.mu.Lock()
	inst := p.instance
	p.mu.Unlock()
	p.peersMu.Lock()
	defer p.peersMu.Unlock()
	if p.peerRead == nil {
		p.peerRead = map[int]time.Time{}
	}
	table := map[int]Peer{inst.ID: {ID: inst.ID, Address: p.cfg.Address, Version: inst.Version, TaskID: p.cfg.TaskID, State: PeerHeld}}
	for id, peer := range fresh {
		table[id] = peer
		p.peerRead[id] = now
	}
	for _, old := range p.peers {
		if _, ok := table[old.ID]; ok {
			continue
		}
		if now.Sub(p.peerRead[old.ID]) > p.cfg.LeaseDuration {
			old = Peer{ID: old.ID, Version: old.Version, State: PeerUnknown}
		}
		table[old.ID] = old
	}
	return table
}

// setPeers stores a new table and wakes PeersChanged waiters if it differs.
func (p *Provider) setPeers(table map[int]Peer) {
	out := make([]Peer, 0, len(table))
	for _, peer := range table {
		out = append(out, peer)
	}
	slices.SortFunc(out, func(a, b Peer) int { return a.ID - b.ID })
	p.peersMu.Lock()
	defer p.peersMu.Unlock()
	if slices.Equal(out, p.peers) {
		return
	}
	p.peers = out
	if p.peersCh != nil {
		close(p.peersCh)
		p.peersCh = nil
	}
}
