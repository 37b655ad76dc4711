package nodeid

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

type providerState int

const (
	stateIdle providerState = iota
	stateAcquiring
	stateHolding
	stateLost
	stateClosed
)

// Provider gives this task one node ID at a time, for one tenure: Acquire
// takes an ID, a background loop renews it, Close releases it. When the lease
// is lost the provider calls OnLost and stays lost; a new tenure needs a new
// Provider (and, in practice, a new process).
type Provider struct {
	repo Repository
	cfg  Config
	log  *slog.Logger

	randMu sync.Mutex // cfg.Rand is not safe for concurrent use

	// size is the cluster size in use: Config.ClusterSize, which the
	// simulation changes while tasks wait (a redeploy after a scale).
	size atomic.Int64

	peersMu  sync.Mutex // guards peers, peersCh and peerRead, apart from mu: readers may be slow
	peers    []Peer
	peersCh  chan struct{}
	peerRead map[int]time.Time // when each peer's object was last read

	mu       sync.Mutex
	state    providerState
	instance NodeInstance
	etag     string
	deadline time.Time // self-fence deadline: last successful send + L - m
	acquired time.Time
	graceful bool
	ready    bool
	known    VersionMappings
	pending  map[string]time.Time // nonce -> send time of writes not yet answered with success
	// unreadSince: when a rejected renewal first found the object
	// unreadable; zero otherwise.
	unreadSince time.Time
	err         error
	relErr      error // why the release on Close failed
	detach      bool  // HandOff: stop without releasing

	done     chan struct{} // closed when the tenure ends (lost or closed)
	stop     chan struct{} // closed by Close
	stopOnce sync.Once
	loops    sync.WaitGroup // renew loop, watchdog, refresh loop

	seen observations // rule 2; used by Acquire only
	// Used by Acquire only: the highest version of each node seen in any
	// lease read while acquiring, and the cluster marker once read.
	acqKnown VersionMappings
	marker   *ClusterMarker

	stats providerStats
}

// validity is how long a write sent at s keeps the lease valid for us.
func (p *Provider) validity() time.Duration {
	if bugOn(bugNoMargin) {
		return p.cfg.LeaseDuration
	}
	return p.cfg.LeaseDuration - p.cfg.SafetyMargin
}

// clusterSize is the number of node IDs in use (see size).
func (p *Provider) clusterSize() int { return int(p.size.Load()) }

// providerStats are counters for metrics and tests.
type providerStats struct {
	acquireAttempts atomic.Int64
	renewals        atomic.Int64
	renewalFailures atomic.Int64
	selfFences      atomic.Int64
}

// Stats is a snapshot of a provider's counters.
type Stats struct {
	AcquireAttempts int64 // conditional PUTs sent to take an ID
	Renewals        int64 // successful renewals
	RenewalFailures int64 // renewal attempts that failed, for any reason
	SelfFences      int64 // losses by the self-fence deadline
}

// NewProvider validates cfg and returns a provider on repo. Nothing is read
// or written before Acquire.
func NewProvider(repo Repository, cfg Config) (*Provider, error) {
	if repo == nil {
		return nil, fmt.Errorf("%w: no repository", ErrInvalidConfig)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Provider{
		repo:     repo,
		cfg:      cfg,
		log:      cfg.Logger.With("task_id", cfg.TaskID),
		done:     make(chan struct{}),
		stop:     make(chan struct{}),
		seen:     observations{},
		acqKnown: VersionMappings{},
		pending:  map[string]time.Time{},
	}
	if p.cfg.OnLost == nil {
		p.cfg.OnLost = func(err error) {
			fmt.Fprintf(os.Stderr, "nodeid: %v: exiting with code %d\n", err, ExitCodeLeaseLost)
			os.Exit(ExitCodeLeaseLost)
		}
	}
	p.size.Store(int64(cfg.ClusterSize))
	return p, nil
}

// Config returns the configuration in force, defaults applied.
func (p *Provider) Config() Config { return p.cfg }

// Instance returns the node ID and version held, or the last held after a
// loss; the zero value before Acquire.
func (p *Provider) Instance() NodeInstance {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.instance
}

// Token returns the fencing token of the current tenure: its version. Stamp
// it on every side effect so a sink can reject a stale holder's writes.
func (p *Provider) Token() Version { return p.Instance().Version }

// Valid reports whether the lease is held and its self-fence deadline has
// not passed. It reads the clock itself, so it turns false at the deadline
// even if the watchdog has not run yet.
func (p *Provider) Valid() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state == stateHolding && p.cfg.Clock.Now().Before(p.deadline)
}

// Deadline returns the self-fence deadline as a reading of the provider's
// clock (monotonic for the real clock), and whether a lease is held.
func (p *Provider) Deadline() (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.deadline, p.state == stateHolding
}

// Done is closed when the tenure ends: the lease was lost or released.
func (p *Provider) Done() <-chan struct{} { return p.done }

// Err returns why the tenure ended: a *LostError (errors.Is ErrLeaseLost),
// ErrClosed after Close, or nil while it lasts.
func (p *Provider) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// PreviousGracefullyShutdown reports whether the lease we took had been
// released (or never held), rather than taken over after expiry. Only then
// may the previous data directory be hard-linked whole: no stale holder can
// still be writing into it.
func (p *Provider) PreviousGracefullyShutdown() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.graceful
}

// KnownVersions returns this task's view of every node's version.
func (p *Provider) KnownVersions() VersionMappings {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.known.Clone()
}

// Ready reports whether the node may start serving: it holds a valid lease
// and, after an ungraceful takeover with a ReadinessTimeout, every live peer
// knows its new version (or the timeout passed).
func (p *Provider) Ready() bool {
	p.mu.Lock()
	ready := p.ready
	p.mu.Unlock()
	return ready && p.Valid()
}

// WaitReady blocks until Ready, the tenure ends, or ctx is done.
func (p *Provider) WaitReady(ctx context.Context) error {
	poll := min(p.cfg.RenewInterval, 200*time.Millisecond)
	t := p.cfg.Clock.NewTimer(poll)
	defer t.Stop()
	for {
		if p.Ready() {
			return nil
		}
		if err := p.Err(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.done:
		case <-t.C():
			t.Reset(poll)
		}
	}
}

// Stats returns the provider's counters.
func (p *Provider) Stats() Stats {
	return Stats{
		AcquireAttempts: p.stats.acquireAttempts.Load(),
		Renewals:        p.stats.renewals.Load(),
		RenewalFailures: p.stats.renewalFailures.Load(),
		SelfFences:      p.stats.selfFences.Load(),
	}
}

// Acquire takes a node ID and starts renewing it. It waits, listing the
// leases again every PollInterval (jittered), while every allowed ID is held,
// until AcquireTimeout (ErrAcquireTimeout), ctx ends, or Close. Errors that
// waiting cannot cure (access denied, no such bucket) return at once.
func (p *Provider) Acquire(ctx context.Context) (NodeInstance, error) {
	p.mu.Lock()
	if p.state != stateIdle {
		st := p.state
		p.mu.Unlock()
		if st == stateClosed {
			return NodeInstance{}, ErrClosed
		}
		return NodeInstance{}, errors.New("nodeid: Acquire called twice on one provider")
	}
	p.state = stateAcquiring
	p.mu.Unlock()

	start := p.cfg.Clock.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-p.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	var acquireDeadline time.Time
	if p.cfg.AcquireTimeout > 0 {
		acquireDeadline = start.Add(p.cfg.AcquireTimeout)
	}

	waitingLogged := false
	relists := 0
	wait := p.cfg.Clock.NewTimer(time.Hour)
	wait.Stop()
	defer wait.Stop()
	for pass := 0; ; pass++ {
		var (
			inst      NodeInstance
			ok, stale bool
			err       error
		)
		if p.cfg.Strategy == StrategySequential {
			inst, ok, err = p.trySequential(ctx)
		} else {
			inst, ok, stale, err = p.trySpread(ctx)
		}
		if fatalStorageError(err) {
			return p.failAcquire(err)
		}
		if ok {
			took := p.cfg.Clock.Now().Sub(start)
			deadline, _ := p.Deadline()
			graceful := p.PreviousGracefullyShutdown()
			p.log.Info("acquired node id", "node_id", inst.ID, "version", int64(inst.Version),
				"previous_graceful", graceful, "took", took.Round(time.Millisecond))
			p.emit(Event{Kind: EventAcquired, Instance: inst, Deadline: deadline, Latency: took, Graceful: graceful})
			return inst, nil
		}
		if err != nil {
			p.log.Warn("reading leases failed, retrying", "err", err)
		} else {
			if stale && relists < p.clusterSize() {
				relists++ // others are taking IDs right now: look again at once
				continue
			}
			relists = 0
			if !waitingLogged {
				p.log.Info("no node id free, waiting", "cluster_size", p.clusterSize(), "poll_interval", p.cfg.PollInterval)
				waitingLogged = true
			}
		}

		// Poll at least once per PollInterval, so a released ID is taken
		// within it; the randomness keeps waiting tasks apart.
		delay := p.between(p.cfg.PollInterval/2, p.cfg.PollInterval)
		if p.cfg.Strategy == StrategySequential {
			delay = min(time.Second<<min(pass, 5), 30*time.Second)
		}
		if !acquireDeadline.IsZero() {
			left := acquireDeadline.Sub(p.cfg.Clock.Now())
			if left <= 0 {
				return p.failAcquire(fmt.Errorf("%w (%v)", ErrAcquireTimeout, p.cfg.AcquireTimeout))
			}
			delay = min(delay, left)
		}
		wait.Reset(delay)
		select {
		case <-wait.C():
		case <-ctx.Done():
			select {
			case <-p.stop:
				return p.failAcquire(ErrClosed)
			default:
			}
			return p.failAcquire(ctx.Err())
		}
	}
}

func (p *Provider) failAcquire(err error) (NodeInstance, error) {
	p.mu.Lock()
	if p.state == stateAcquiring {
		p.state = stateIdle
		if errors.Is(err, ErrClosed) {
			p.state = stateClosed
		}
	}
	p.mu.Unlock()
	return NodeInstance{}, err
}

// fatalStorageError reports errors that retrying will not cure.
func fatalStorageError(err error) bool {
	return errors.Is(err, ErrAccessDenied) || errors.Is(err, ErrInvalidConfig) ||
		(errors.Is(err, ErrNotFound) && isNoSuchBucket(err))
}

func isNoSuchBucket(err error) bool {
	var se *StorageError
	return errors.As(err, &se) && (se.Code == "NoSuchBucket" || se.Op == "list")
}

// trySpread is one pass of the default strategy: one List, then the
// candidates it shows, starting at a task-specific ID.
func (p *Provider) trySpread(ctx context.Context) (NodeInstance, bool, bool, error) {
	sent := p.cfg.Clock.Now()
	listing, err := p.list(ctx)
	rtt := p.cfg.Clock.Now().Sub(sent)
	if err == nil {
		listing, err = p.awaitBootstrap(ctx, listing, rtt)
	}
	var created []Record
	if err == nil && (!listing.MarkerSeen || len(missingIDs(listing, p.clusterSize())) > 0) {
		// First start of the cluster, a scale-up, or a deleted object.
		ictx, cancel := context.WithTimeout(ctx, time.Duration(p.clusterSize()+4)*p.cfg.RequestTimeout)
		var b bootstrap
		// While others create faster than what is left, read the marker a
		// few times (a cheap GET) rather than race them (a create and a LIST
		// per lost race).
		b, err = initializeFrom(ictx, p.repo, listing, p.clusterSize(), p.cfg.TaskID, p.cfg.LeaseDuration, p.nonce, func(ctx context.Context) bool {
			return p.pollMarker(ctx, rtt, 3)
		})
		cancel()
		// A marker we created ourselves is read back when needed: only the
		// server knows its Last-Modified, which the freshness proof needs.
		listing, created = b.listing, b.created
		if err == nil && len(created) == 0 && len(missingIDs(listing, p.clusterSize())) > 0 {
			// Others created the objects: the listing we hold may lack them.
			listing, err = p.list(ctx)
		}
	}
	if err != nil {
		return NodeInstance{}, false, false, err
	}
	arrived := p.cfg.Clock.Now()
	for _, s := range listing.Slots {
		if s.LastModified.IsZero() {
			continue // created by us just now: only its ETag is known
		}
		p.seen.see(s.ID, s.ETag, arrived)
	}
	if err := p.checkClusterLease(ctx); err != nil {
		return NodeInstance{}, false, false, err
	}
	inst, ok, stale := p.tryListing(ctx, listing, created)
	return inst, ok, stale, nil
}

// awaitBootstrap waits for the cluster marker while the listing shows a
// cluster being created by others: objects missing and no marker. Going on
// from such a listing would read every object to judge the cluster fresh
// (surveyLeases), one GET per object, and race the creators for the last
// objects, while they need only a few more round trips. It reads the marker,
// which the acquisition needs anyway, at most ClusterSize times (pollMarker;
// about as long as one task alone would take to create every object), then
// lists again. It only delays: what follows is decided from the new listing
// as before.
func (p *Provider) awaitBootstrap(ctx context.Context, listing Listing, rtt time.Duration) (Listing, error) {
	if listing.MarkerSeen || len(listing.Slots) == 0 || len(missingIDs(listing, p.clusterSize())) == 0 {
		return listing, nil
	}
	p.pollMarker(ctx, rtt, p.clusterSize())
	if err := ctx.Err(); err != nil {
		return listing, err
	}
	return p.list(ctx)
}

// pollMarker reads the cluster marker up to n times, each after a pause of
// twice the last request's round trip (shorter pauses mostly add 404s), and
// reports whether it found it.
func (p *Provider) pollMarker(ctx context.Context, rtt time.Duration, n int) bool {
	pause := p.cfg.Clock.NewTimer(time.Hour)
	defer pause.Stop()
	for range n {
		pause.Reset(2 * rtt)
		select {
		case <-pause.C():
		case <-ctx.Done():
			return false
		}
		sent := p.cfg.Clock.Now()
		gctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
		m, err := p.repo.Marker(gctx)
		cancel()
		rtt = p.cfg.Clock.Now().Sub(sent)
		if err == nil {
			p.marker = &m
			return true
		}
		if !errors.Is(err, ErrNotFound) {
			return false
		}
	}
	return false
}

// list and get bound one request made while acquiring: the repository may
// have no timeout of its own, and a lost answer must not stall the task.
// A listing may span pages, so it gets twice as long.
func (p *Provider) list(ctx context.Context) (Listing, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*p.cfg.RequestTimeout)
	defer cancel()
	return p.repo.List(ctx)
}

func (p *Provider) get(ctx context.Context, id int) (Record, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	return p.repo.Get(ctx, id)
}

// trySequential is one pass of the anchor's strategy, kept as a baseline for
// benchmarks: IDs in order 0..N-1, a GET and, if free, a conditional PUT
// each; the caller backs off exponentially (1 s doubling to 30 s) after a
// full pass. Expiry is judged by the same safe rules as the default.
func (p *Provider) trySequential(ctx context.Context) (NodeInstance, bool, error) {
	ictx, cancel := context.WithTimeout(ctx, time.Duration(p.clusterSize()+2)*p.cfg.RequestTimeout)
	err := Initialize(ictx, p.repo, p.clusterSize(), p.cfg.TaskID, p.cfg.LeaseDuration)
	cancel()
	if err != nil {
		return NodeInstance{}, false, err
	}
	if err := p.checkClusterLease(ctx); err != nil {
		return NodeInstance{}, false, err
	}
	for _, id := range p.allowedIDs() {
		rec, err := p.get(ctx, id)
		arrived := p.cfg.Clock.Now()
		if err != nil {
			if fatalStorageError(err) {
				return NodeInstance{}, false, err
			}
			continue
		}
		p.seen.see(id, rec.ETag, arrived)
		p.learn(rec.Lease)
		if free, graceful := p.judge(ctx, rec, arrived); free {
			if inst, ok := p.take(ctx, rec, graceful); ok {
				return inst, true, nil
			}
		}
	}
	return NodeInstance{}, false, nil
}

// tryListing tries the candidates of one listing, each with one GET and one
// conditional PUT, and reports whether one was taken. It stops early and
// reports the listing stale when another task took a slot since the listing
// (a GET shows a new holder, or our PUT lost the race): with many tasks
// starting together a fresh listing is cheaper than a GET per stale slot.
//
// Objects this task has just created are not read back: their content and
// ETag are known, and the conditional PUT fails harmlessly if they changed
// meanwhile.
func (p *Provider) tryListing(ctx context.Context, listing Listing, created []Record) (inst NodeInstance, ok, stale bool) {
	for _, slot := range p.candidates(listing, created) {
		var rec Record
		var err error
		if i := slices.IndexFunc(created, func(r Record) bool { return r.ID == slot.ID && r.ETag == slot.ETag }); i >= 0 && !slot.LastModified.IsZero() {
			// Its Last-Modified comes from the listing: the same body
			// landing again later (a duplicated request after an outside
			// delete) has the same ETag but a later time.
			rec = created[i]
			rec.LastModified, rec.ServerDate = slot.LastModified, listing.ServerDate
		} else {
			rec, err = p.get(ctx, slot.ID)
		}
		arrived := p.cfg.Clock.Now()
		if errors.Is(err, ErrCorruptLease) {
			p.log.Warn("skipping corrupt lease object", "node_id", slot.ID, "etag", rec.ETag, "err", err)
			continue
		}
		if err != nil {
			continue
		}
		p.seen.see(slot.ID, rec.ETag, arrived)
		p.learn(rec.Lease)
		free, graceful := p.judge(ctx, rec, arrived)
		if !free {
			if rec.ETag != slot.ETag {
				return NodeInstance{}, false, true
			}
			continue
		}
		if inst, ok := p.take(ctx, rec, graceful); ok {
			return inst, true, false
		}
		return NodeInstance{}, false, true
	}
	return NodeInstance{}, false, false
}

// candidates returns the allowed slots that may be free by the listing alone,
// starting with the objects this task has just created (each object has one
// creator, so creators that take their own do not collide), else with a
// task-specific slot (so tasks starting together spread over the IDs instead
// of all racing for ID 0), then released ones, then the rest, each group in
// random order.
func (p *Provider) candidates(listing Listing, created []Record) []Slot {
	allowed := p.allowedIDs()
	if len(allowed) == 0 {
		return nil
	}
	offset := int(taskHash(p.cfg.TaskID) % uint32(len(allowed)))
	now := p.cfg.Clock.Now()

	var first, released, expired []Slot
	for _, c := range created {
		if slot, ok := listing.Slot(c.ID); ok && slot.ETag == c.ETag && slices.Contains(allowed, c.ID) {
			first = append(first, slot)
		}
	}
	for i := range allowed {
		slot, ok := listing.Slot(allowed[(offset+i)%len(allowed)])
		if !ok || slices.ContainsFunc(first, func(f Slot) bool { return f.ID == slot.ID }) {
			continue
		}
		switch {
		case i == 0 && len(created) == 0 && (sizeSuggestsReleased(slot.Size) || p.expiredByListing(slot, listing.ServerDate, now)):
			first = append(first, slot)
		case sizeSuggestsReleased(slot.Size):
			released = append(released, slot)
		case p.expiredByListing(slot, listing.ServerDate, now):
			expired = append(expired, slot)
		}
	}
	p.shuffle(released)
	p.shuffle(expired)
	return append(append(first, released...), expired...)
}

func (p *Provider) expiredByListing(s Slot, serverDate, now time.Time) bool {
	L := p.cfg.LeaseDuration
	return ExpiredByServerClock(s.LastModified, serverDate, L) || p.seen.unchangedFor(s.ID, s.ETag, now) >= L
}

func (p *Provider) allowedIDs() []int {
	if len(p.cfg.AllowedIDs) > 0 {
		ids := append([]int(nil), p.cfg.AllowedIDs...)
		sort.Ints(ids)
		return ids
	}
	ids := make([]int, p.clusterSize())
	for i := range ids {
		ids[i] = i
	}
	return ids
}

// judge decides whether the lease in rec may be taken, and whether its
// previous holder stopped gracefully (so its data may be hard-linked).
//
//   - A lease released by its holder (version >= 1) is free at once.
//   - A never-held lease (version 0) is free at once only if the cluster
//     marker names its ETag: it is then the object made at bootstrap,
//     unchanged. Any other never-held object was created after the marker
//     (an outside delete, a stale view): its ID may have a live holder, so
//     it is judged like a held lease.
//   - A forced release (release --force) is free at once but not graceful:
//     an operator's word that the holder is dead does not stop its writes.
//   - A legacy (empty) released object is judged like a held lease, and is
//     never graceful: every empty object has the same ETag, so it proves
//     nothing about which release it is, and an If-Match on it lands on any
//     later empty state. Waiting until it has been quiet for a lease
//     duration keeps a writer of empty bodies that is still active (an older
//     version of this tool) from slipping a tenure in between.
//   - A held lease is free when either expiry rule says so.
func (p *Provider) judge(ctx context.Context, rec Record, arrived time.Time) (free, graceful bool) {
	l := rec.Lease
	if !l.Acquirable {
		return false, false
	}
	if !l.Held() && l.Instance.Version > 0 && !l.Legacy {
		return !bugOn(bugReleasedNeverFree), !l.Forced
	}
	marker, err := p.clusterMarker(ctx)
	if err != nil {
		return false, false // without the marker neither proof nor floor: wait
	}
	if !l.Held() && !l.Legacy && (bugOn(bugFreshFromAbsence) || marker.provesFresh(rec)) {
		return true, true
	}
	if bugOn(bugWallClockExpiry) {
		return !p.cfg.Clock.Now().Before(l.Expires), false
	}
	// The holder's own duration may be gone from the object (overwritten,
	// or recreated by a task with a shorter one): the cluster's, recorded in
	// the marker, is a floor that no task exceeds (Acquire refuses one that
	// would).
	//
	// A lease of Camunda's provider records no duration; the one its
	// timestamp claims is a floor too (see Record.ClaimedDuration).
	claimed := rec.ClaimedDuration()
	if bugOn(bugIgnoreClaimedDuration) {
		claimed = 0
	}
	lease := max(l.Duration, p.cfg.LeaseDuration, marker.LeaseDuration, claimed)
	if ExpiredByServerClock(rec.LastModified, rec.ServerDate, lease) {
		return true, false
	}
	return p.seen.unchangedFor(rec.ID, rec.ETag, arrived) >= lease, false
}

// checkClusterLease refuses a lease duration above the cluster's (recorded in
// the marker): waiters judge a lease whose object no longer records its
// holder's duration by the cluster's, so a longer one could be taken while
// its holder still acts.
func (p *Provider) checkClusterLease(ctx context.Context) error {
	m, err := p.clusterMarker(ctx)
	if err != nil {
		return err
	}
	if L := m.LeaseDuration; L > 0 && p.cfg.LeaseDuration > L {
		return fmt.Errorf("%w: lease duration %v is longer than the cluster's %v (recorded in %s when it was created); use %v or less", ErrInvalidConfig, p.cfg.LeaseDuration, L, MarkerKeyName, L)
	}
	return nil
}

// clusterMarker returns the cluster marker, read once per acquisition. Until
// it exists it is the zero marker, which proves nothing fresh; an error means
// it could not be read, and then nothing may be judged by it.
func (p *Provider) clusterMarker(ctx context.Context) (ClusterMarker, error) {
	if p.marker == nil {
		gctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
		m, err := p.repo.Marker(gctx)
		cancel()
		switch {
		case errors.Is(err, ErrNotFound):
			return ClusterMarker{}, nil // none yet: it proves nothing
		case err != nil:
			return ClusterMarker{}, fmt.Errorf("reading the cluster marker: %w", err)
		}
		p.marker = &m
	}
	return *p.marker, nil
}

// learn records the versions a lease read while acquiring shows, so the
// version we take is above every version anyone knows, even if the object
// itself went back (an outside delete and recreation).
func (p *Provider) learn(l Lease) {
	p.acqKnown.Observe(l.Instance.ID, l.Instance.Version)
	for id, v := range l.KnownVersions {
		p.acqKnown.Observe(id, v)
	}
}

// take writes our lease over rec with one conditional PUT.
func (p *Provider) take(ctx context.Context, rec Record, graceful bool) (NodeInstance, bool) {
	p.learn(rec.Lease)
	if l := rec.Lease; l.Held() || l.Instance.Version > 0 || l.Legacy || !graceful {
		// The object's version may be below one handed out before: an
		// outside overwrite, a recreation that landed late. Every lease's
		// knowledge is read first, so the version taken is above all that
		// the bucket records. Only a never-held object the marker proves
		// fresh (a start storm) needs none: its ID was never held. A LIST
		// and a GET per ID, once per takeover.
		if listing, err := p.list(ctx); err == nil {
			sctx, cancel := context.WithTimeout(ctx, time.Duration(len(listing.Slots)+1)*p.cfg.RequestTimeout)
			s := surveyLeases(sctx, p.repo, listing, 0)
			cancel()
			if err := s.unreadExcept(-1); err != nil && !bugOn(bugTakeAfterFailedSurvey) {
				// A lease we could not read may record a version above
				// all we know: taking now could repeat it. Try later.
				p.log.Warn("not taking the node id: a lease could not be read", "node_id", rec.ID, "err", err)
				return NodeInstance{}, false
			}
			for id, v := range s.known {
				p.acqKnown.Observe(id, v)
			}
		} else {
			return NodeInstance{}, false
		}
	}
	if p.acqKnown[rec.ID] >= MaxVersion {
		p.log.Error("node id has reached the largest version; it cannot be taken again", "node_id", rec.ID, "version", int64(p.acqKnown[rec.ID]))
		return NodeInstance{}, false
	}
	inst := NodeInstance{ID: rec.ID, Version: p.acqKnown[rec.ID] + 1}
	if bugOn(bugVersionNotBumped) {
		inst.Version = max(p.acqKnown[rec.ID], 1)
	}
	if bugOn(bugVersionFromObject) {
		inst.Version = rec.Lease.Instance.Version + 1
	}
	known := p.acqKnown.Clone()
	known.Observe(inst.ID, inst.Version)
	// The deadline and the timestamp both count from sent, read before the
	// body is built: a pause in between only makes the deadline earlier.
	sent := p.cfg.Clock.Now()
	lease := p.newLease(inst, known, sent)

	p.stats.acquireAttempts.Add(1)
	p.emit(Event{Kind: EventAcquireAttempt, Instance: inst})
	wctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	etag, err := p.repo.Write(wctx, lease, rec.ETag)
	cancel()
	if err != nil {
		if errors.Is(err, ErrPreconditionFailed) || errors.Is(err, ErrConflict) || errors.Is(err, ErrNotFound) {
			p.log.Debug("lost the race for a node id", "node_id", inst.ID, "err", err)
			return NodeInstance{}, false
		}
		// No answer: the write may have landed. Look for our nonce; if we
		// cannot tell, leave it: an unrenewed lease simply expires.
		got, gerr := p.get(ctx, inst.ID)
		if gerr != nil || got.Lease.Nonce != lease.Nonce {
			p.log.Warn("acquisition write failed", "node_id", inst.ID, "version", int64(inst.Version), "err", err)
			return NodeInstance{}, false
		}
		etag = got.ETag
	}

	p.mu.Lock()
	if p.state != stateAcquiring {
		p.mu.Unlock()
		return NodeInstance{}, false
	}
	p.state = stateHolding
	p.instance = inst
	p.etag = etag
	p.deadline = sent.Add(p.validity())
	p.acquired = sent
	p.graceful = graceful
	p.known = known
	p.ready = graceful || p.cfg.ReadinessTimeout == 0
	p.mu.Unlock()

	p.startLoops(p.cfg.RenewInterval)
	return inst, true
}

// newLease is our lease of inst, to be sent at sent: the moment our deadline
// will count from, so its timestamp is not earlier than the deadline.
func (p *Provider) newLease(inst NodeInstance, known VersionMappings, sent time.Time) Lease {
	return Lease{
		TaskID:        p.cfg.TaskID,
		Instance:      inst,
		Expires:       p.expiryStamp(sent),
		Duration:      p.cfg.LeaseDuration,
		Nonce:         p.nonce(),
		KnownVersions: known,
		Acquirable:    true,
		Address:       p.cfg.Address,
	}
}

// expiryStamp is the timestamp of a lease whose deadline counts from sent:
// when it expires by the wall clock, for readers that judge by wall clocks
// (Camunda's provider). Our holder stops m before it by its own clock, which
// is what keeps such a reader with a clock up to m ahead from taking a live
// lease. The system wall clock is read after sent, so a pause in between
// only makes the timestamp later.
func (p *Provider) expiryStamp(sent time.Time) time.Time {
	if w := p.cfg.Wall(); w.After(sent) {
		sent = w
	}
	return sent.Add(p.cfg.LeaseDuration)
}

// startLoops starts the goroutines of a held lease; the first renewal is
// due after firstRenewal.
func (p *Provider) startLoops(firstRenewal time.Duration) {
	p.loops.Add(3)
	go func() { defer p.loops.Done(); p.renewLoop(firstRenewal) }()
	go func() { defer p.loops.Done(); p.watchdog() }()
	go func() { defer p.loops.Done(); p.refreshLoop() }()
}

// renewLoop renews every RenewInterval, retries failed renewals sooner, and
// releases the lease on Close. It is the only writer of the lease object
// while the lease is held.
func (p *Provider) renewLoop(first time.Duration) {
	t := p.cfg.Clock.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			p.release()
			return
		case <-p.done:
			return
		case <-t.C():
		}
		next, ok := p.renew()
		if !ok {
			return
		}
		t.Reset(next)
	}
}

// renew sends one renewal and returns the delay until the next one.
func (p *Provider) renew() (time.Duration, bool) {
	p.mu.Lock()
	if p.state != stateHolding {
		p.mu.Unlock()
		return 0, false
	}
	sent := p.cfg.Clock.Now()
	lease := p.newLease(p.instance, p.known.Clone(), sent)
	etag, deadline := p.etag, p.deadline
	// Recorded before sending: a duplicated request can land and have its
	// twin answered 412, and reconcile must then recognise our own write.
	p.pending[lease.Nonce] = sent
	p.mu.Unlock()

	if !sent.Before(deadline) && !bugOn(bugRenewAfterDeadline) {
		// Woken after the deadline (a paused process, a starved goroutine):
		// never send a renewal for a lease we no longer hold.
		p.stats.selfFences.Add(1)
		p.lose(reasonSelfFence, nil)
		return 0, false
	}
	ctx, cancel := p.boundedContext(deadline, sent)
	defer cancel()
	newETag, err := p.repo.Write(ctx, lease, etag)
	if err == nil {
		return p.renewed(sent, newETag)
	}
	p.stats.renewalFailures.Add(1)
	p.emit(Event{Kind: EventRenewalFailed, Instance: lease.Instance, Latency: p.cfg.Clock.Now().Sub(sent), Err: err})
	switch {
	case errors.Is(err, ErrNotFound):
		p.loseRestoring("lease object deleted", err, lease.Instance, "", deadline)
		return 0, false
	case errors.Is(err, ErrPreconditionFailed), errors.Is(err, ErrConflict):
		return p.reconcile(err)
	default:
		// No answer: the write may have landed. Its nonce stays pending,
		// so a later 412 against our own write is not taken for a loss.
		p.mu.Lock()
		holding := p.state == stateHolding
		p.mu.Unlock()
		if !holding {
			return 0, false
		}
		p.log.Warn("renewal failed, retrying", "node_id", lease.Instance.ID, "version", int64(lease.Instance.Version),
			"valid_for", deadline.Sub(p.cfg.Clock.Now()).Round(time.Millisecond), "err", err)
		return p.retryDelay(), true
	}
}

// recreateDeleted runs when the holder finds its lease object deleted (or
// replaced below its version), after it has stopped counting itself as the
// holder and before OnLost: it writes the object as an expiring lease of an
// unknown holder at the holder's own version. Only the holder may know that
// version (with one node ID, or before its peers learned it); without this
// the next holder would start again from a lower one. With etag empty the
// write is a create (If-None-Match: *), else it replaces the recreation it
// read (If-Match).
//
// A spare may recreate the object first, below our version, while we stop
// (Valid is already false): the create then gets 412, and the holder reads
// the object and replaces such a recreation, as often as it takes until its
// deadline. That is in time: the spare's recreation is itself an expiring
// lease of a full lease duration, written after our last renewal was sent,
// so no one can take the ID before our deadline. Bounded by the deadline,
// this cannot delay the stop past it.
func (p *Provider) recreateDeleted(inst NodeInstance, etag string, deadline time.Time) {
	for {
		now := p.cfg.Clock.Now()
		if !now.Before(deadline) {
			p.log.Warn("lease object not restored at our version before our deadline", "node_id", inst.ID, "version", int64(inst.Version))
			return
		}
		l := Lease{
			TaskID:        recreatedPrefix + p.cfg.TaskID,
			Instance:      inst,
			Expires:       p.expiryStamp(now),
			Duration:      p.cfg.LeaseDuration,
			Nonce:         p.nonce(),
			KnownVersions: p.KnownVersions(),
			Acquirable:    true,
		}
		ctx, cancel := p.boundedContext(deadline, now)
		var err error
		if etag == "" {
			_, err = p.repo.Create(ctx, l)
		} else {
			_, err = p.repo.Write(ctx, l, etag)
		}
		cancel()
		if err == nil {
			p.log.Info("recreated the deleted lease object as an expiring lease at our version", "node_id", inst.ID, "version", int64(inst.Version))
			return
		}
		p.log.Info("lease object not recreated at our version", "node_id", inst.ID, "version", int64(inst.Version), "err", err)
		if errors.Is(err, ErrNotFound) {
			etag = "" // deleted again (AWS answers an If-Match on a missing key 404): create
			continue
		}
		if errors.Is(err, ErrPreconditionFailed) || errors.Is(err, ErrConflict) {
			// Someone wrote first. Replace it only if it is a recreation
			// below our version; anything else is left alone.
			ctx, cancel := p.boundedContext(deadline, p.cfg.Clock.Now())
			rec, gerr := p.repo.Get(ctx, inst.ID)
			cancel()
			switch {
			case errors.Is(gerr, ErrNotFound):
				etag = ""
				continue
			case gerr == nil && rec.Lease.Instance.ID == inst.ID && rec.Lease.Instance.Version < inst.Version && rec.Lease.Acquirable:
				p.log.Info("replacing a recreation below our version", "node_id", inst.ID, "version", int64(inst.Version),
					"found_task", rec.Lease.TaskID, "found_version", int64(rec.Lease.Instance.Version))
				etag = rec.ETag
				continue
			case gerr == nil:
				return // at or above our version, or scaled down: not ours to touch
			}
		}
		wait := min(p.retryDelay(), deadline.Sub(p.cfg.Clock.Now()))
		if wait <= 0 {
			continue // the deadline check at the top ends it
		}
		t := p.cfg.Clock.NewTimer(wait)
		<-t.C()
		t.Stop()
	}
}

// reconcile reads the object after a 412 or 409 to tell our own landed write
// (answer lost, an SDK retry, a duplicated request) from someone else's.
func (p *Provider) reconcile(cause error) (time.Duration, bool) {
	now := p.cfg.Clock.Now()
	p.mu.Lock()
	inst, etag, deadline := p.instance, p.etag, p.deadline
	p.mu.Unlock()

	ctx, cancel := p.boundedContext(deadline, now)
	defer cancel()
	rec, err := p.repo.Get(ctx, inst.ID)
	switch {
	case errors.Is(err, ErrNotFound):
		p.loseRestoring("lease object deleted", cause, inst, "", deadline)
		return 0, false
	case errors.Is(err, ErrCorruptLease):
		p.lose("lease object overwritten with a corrupt object", err)
		return 0, false
	case err != nil:
		// Cannot tell yet. A rejected renewal is most likely someone
		// else's write, so the holder does not wait for its deadline:
		// unreadable for a request timeout, it stops.
		p.mu.Lock()
		if p.unreadSince.IsZero() {
			p.unreadSince = now
		}
		since := p.unreadSince
		p.mu.Unlock()
		if p.cfg.Clock.Now().Sub(since) >= p.cfg.RequestTimeout {
			p.lose("renewal rejected and the lease object cannot be read", errors.Join(cause, err))
			return 0, false
		}
		return p.retryDelay(), true
	}

	p.mu.Lock()
	p.unreadSince = time.Time{}
	sent, ours := p.pending[rec.Lease.Nonce]
	p.mu.Unlock()
	l := rec.Lease
	switch {
	case ours && l.TaskID == p.cfg.TaskID && l.Instance == inst && l.Acquirable:
		p.log.Info("renewal had landed although its answer was lost", "node_id", inst.ID, "version", int64(inst.Version))
		return p.renewed(sent, rec.ETag)
	case errors.Is(cause, ErrConflict) && rec.ETag == etag:
		return p.retryDelay(), true // nothing landed: try again
	case l.Instance.ID == inst.ID && l.Instance.Version < inst.Version && l.Acquirable:
		// Deleted and recreated below our version (by a task whose view
		// was stale, or from outside): only we may know ours. Put it
		// back, as an expiring lease, while stopping.
		p.loseRestoring(fmt.Sprintf("lease object replaced below our version (task %q, version %d)", l.TaskID, l.Instance.Version), cause, inst, rec.ETag, deadline)
	case !l.Acquirable:
		p.lose("node id marked unusable (scaled down)", cause)
	case !l.Held():
		p.lose("lease released by someone else", cause)
	case l.TaskID != p.cfg.TaskID || l.Instance != inst:
		p.lose(fmt.Sprintf("lease overwritten by task %q with version %d", l.TaskID, l.Instance.Version), cause)
	default:
		p.lose("lease overwritten", cause)
	}
	return 0, false
}

// renewed records a successful renewal sent at sent. A success that arrives
// after the self-fence deadline does not revive the lease: once past it, the
// holder has stopped and stays stopped.
func (p *Provider) renewed(sent time.Time, etag string) (time.Duration, bool) {
	now := p.cfg.Clock.Now()
	p.mu.Lock()
	if p.state != stateHolding {
		p.mu.Unlock()
		return 0, false
	}
	if !now.Before(p.deadline) && !bugOn(bugRenewAfterDeadline) {
		p.mu.Unlock()
		p.lose("renewal answered after the self-fence deadline", nil)
		return 0, false
	}
	p.etag = etag
	p.unreadSince = time.Time{}
	if d := sent.Add(p.validity()); d.After(p.deadline) {
		p.deadline = d
	}
	clear(p.pending)
	inst, deadline := p.instance, p.deadline
	p.mu.Unlock()
	p.stats.renewals.Add(1)
	p.emit(Event{Kind: EventRenewed, Instance: inst, Deadline: deadline, Latency: now.Sub(sent)})
	return max(sent.Add(p.cfg.RenewInterval).Sub(now), 0), true
}

// boundedContext returns a context for one request that ends at the request
// timeout or at the self-fence deadline, whichever is first.
func (p *Provider) boundedContext(deadline, now time.Time) (context.Context, context.CancelFunc) {
	if bugOn(bugRenewAfterDeadline) {
		return context.WithTimeout(context.Background(), p.cfg.RequestTimeout)
	}
	return context.WithTimeout(context.Background(), max(min(p.cfg.RequestTimeout, deadline.Sub(now)), time.Millisecond))
}

func (p *Provider) retryDelay() time.Duration {
	return p.jitter(min(max(p.cfg.RenewInterval/5, 50*time.Millisecond), time.Second))
}

// watchdog fences the holder at its deadline. It is a timer, not a network
// call, so it fires even while a renewal hangs.
func (p *Provider) watchdog() {
	t := p.cfg.Clock.NewTimer(time.Hour)
	defer t.Stop()
	for {
		p.mu.Lock()
		st, deadline := p.state, p.deadline
		p.mu.Unlock()
		if st != stateHolding {
			return
		}
		left := deadline.Sub(p.cfg.Clock.Now())
		if bugOn(bugRenewAfterDeadline) {
			left = max(left, p.cfg.LeaseDuration) // the watchdog never fires
		}
		if left <= 0 {
			p.stats.selfFences.Add(1)
			p.lose(reasonSelfFence, nil)
			return
		}
		t.Reset(left)
		select {
		case <-t.C():
		case <-p.done:
			return
		}
	}
}

const reasonSelfFence = "not renewed before the self-fence deadline"

// lose ends the tenure: from here on Valid is false. OnLost runs outside the
// lock.
func (p *Provider) lose(reason string, cause error) { p.loseThen(reason, cause, nil) }

// loseRestoring loses the lease, then writes the object back at inst's
// version as an expiring lease (recreateDeleted), before OnLost runs: Valid
// is false and Done closed from the start, and the write is still bounded by
// the old deadline.
func (p *Provider) loseRestoring(reason string, cause error, inst NodeInstance, etag string, deadline time.Time) {
	p.loseThen(reason, cause, func() { p.recreateDeleted(inst, etag, deadline) })
}

// loseThen ends the tenure (Valid false, Done closed), runs then, if any,
// and calls OnLost.
func (p *Provider) loseThen(reason string, cause error, then func()) {
	p.mu.Lock()
	if p.state != stateHolding {
		p.mu.Unlock()
		return
	}
	p.state = stateLost
	err := &LostError{Instance: p.instance, Reason: reason, Err: cause}
	p.err = err
	close(p.done)
	p.mu.Unlock()
	if bugOn(bugWriteAfterLoss) {
		p.mu.Lock()
		l, etag := p.newLease(p.instance, p.known.Clone(), p.cfg.Clock.Now()), p.etag
		p.mu.Unlock()
		wctx, cancel := context.WithTimeout(context.Background(), p.cfg.RequestTimeout)
		_, _ = p.repo.Write(wctx, l, etag)
		cancel()
	}
	attrs := []any{"node_id", err.Instance.ID, "version", int64(err.Instance.Version), "reason", reason}
	if cause != nil {
		attrs = append(attrs, "err", cause)
	}
	p.log.Error("lease lost", attrs...)
	p.emit(Event{Kind: EventLost, Instance: err.Instance, Err: err, SelfFence: reason == reasonSelfFence})
	if then != nil {
		then()
	}
	p.cfg.OnLost(err)
}

// Close stops renewing and releases the lease with If-Match, so a successor
// can take the ID at once with version+1 and knows we stopped cleanly. Stop
// writing data before calling Close. A failed release is logged and
// returned; the lease then simply expires. Close on a provider that is
// acquiring makes Acquire return ErrClosed. Close waits, until ctx ends, for
// the provider's goroutines to finish.
func (p *Provider) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.state == stateIdle {
		p.state = stateClosed
	}
	p.mu.Unlock()
	p.stopOnce.Do(func() { close(p.stop) })
	finished := make(chan struct{})
	go func() { p.loops.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-ctx.Done():
		return ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.relErr
}

// release runs on the renew loop after Close or HandOff.
func (p *Provider) release() {
	p.mu.Lock()
	if p.state != stateHolding {
		p.mu.Unlock()
		return
	}
	p.state = stateClosed
	p.err = ErrClosed
	close(p.done)
	inst, etag, deadline, detach := p.instance, p.etag, p.deadline, p.detach
	p.mu.Unlock()
	if detach {
		return // HandOff: the lease lives on in another process
	}

	released := Lease{
		Writer:        p.cfg.TaskID,
		Instance:      inst,
		Expires:       p.cfg.Clock.Now(),
		Duration:      p.cfg.LeaseDuration,
		Nonce:         p.nonce(),
		KnownVersions: p.KnownVersions(),
		Acquirable:    true,
	}
	ctx, cancel := p.boundedContext(deadline.Add(p.cfg.SafetyMargin), p.cfg.Clock.Now())
	defer cancel()
	if _, err := p.repo.Write(ctx, released, etag); err != nil {
		p.log.Warn("release failed; the lease will expire", "node_id", inst.ID, "version", int64(inst.Version), "err", err)
		p.mu.Lock()
		p.relErr = fmt.Errorf("release %s: %w", inst, err)
		p.mu.Unlock()
		if errors.Is(err, ErrPreconditionFailed) || errors.Is(err, ErrConflict) || errors.Is(err, ErrNotFound) {
			// Deleted, or replaced (perhaps below our version), since our
			// last renewal: only we may know our version, so put it back
			// as an expiring lease, as a holder that finds its object
			// deleted does. recreateDeleted leaves anything at or above
			// our version alone.
			p.recreateDeleted(inst, "", deadline)
		}
		return
	}
	p.log.Info("released node id", "node_id", inst.ID, "version", int64(inst.Version))
	p.emit(Event{Kind: EventReleased, Instance: inst})
}

// refreshLoop learns the peers' versions for our lease's mappings, and
// decides readiness after an ungraceful takeover.
func (p *Provider) refreshLoop() {
	t := p.cfg.Clock.NewTimer(time.Hour)
	defer t.Stop()
	for {
		interval := p.cfg.MappingsRefreshInterval
		p.mu.Lock()
		if !p.ready {
			interval = min(interval, p.cfg.RenewInterval/2)
		}
		p.mu.Unlock()
		t.Reset(p.jitter(interval))
		select {
		case <-t.C():
		case <-p.done:
			return
		}
		p.refresh()
	}
}

func (p *Provider) refresh() {
	p.mu.Lock()
	inst := p.instance
	p.mu.Unlock()
	// Each request has its own timeout: one budget for the whole round
	// would starve the last GETs of a large cluster, every round.
	lctx, cancel := context.WithTimeout(context.Background(), p.cfg.RequestTimeout)
	listing, err := p.repo.List(lctx)
	cancel()
	if err != nil {
		p.setPeers(p.agedPeers(nil))
		return
	}
	learned := VersionMappings{}
	peersKnow := true
	fresh := map[int]Peer{}
	for _, s := range listing.Slots {
		if s.ID == inst.ID {
			continue
		}
		// Every peer is read: a listing's size is only a hint, and a
		// released lease's version is worth learning too.
		gctx, cancel := context.WithTimeout(context.Background(), p.cfg.RequestTimeout)
		rec, err := p.repo.Get(gctx, s.ID)
		cancel()
		switch {
		case errors.Is(err, ErrCorruptLease):
			fresh[s.ID] = Peer{ID: s.ID, State: PeerCorrupt}
		case errors.Is(err, ErrNotFound):
			fresh[s.ID] = Peer{ID: s.ID, State: PeerMissing}
		}
		if err != nil {
			continue
		}
		fresh[s.ID] = peerOf(rec, p.cfg.LeaseDuration)
		learned.Observe(s.ID, rec.Lease.Instance.Version)
		if !rec.Lease.Held() {
			continue
		}
		live := !ExpiredByServerClock(rec.LastModified, rec.ServerDate, max(rec.Lease.Duration, p.cfg.LeaseDuration, rec.ClaimedDuration()))
		if live && rec.Lease.KnownVersions[inst.ID] < inst.Version {
			peersKnow = false
		}
	}
	listed := map[int]bool{}
	for _, s := range listing.Slots {
		listed[s.ID] = true
	}
	for id := range p.clusterSize() {
		if !listed[id] && id != inst.ID {
			fresh[id] = Peer{ID: id, State: PeerMissing}
		}
	}
	table := p.agedPeers(fresh)

	p.setPeers(table)
	p.mu.Lock()
	for id, v := range learned {
		p.known.Observe(id, v)
	}
	becameReady, failedOpen := false, false
	if !p.ready && p.state == stateHolding {
		switch {
		case peersKnow:
			p.ready, becameReady = true, true
		case p.cfg.Clock.Now().Sub(p.acquired) >= p.cfg.ReadinessTimeout:
			p.ready, failedOpen = true, true
		}
	}
	p.mu.Unlock()
	if becameReady {
		p.log.Info("ready: every live peer knows our version", "node_id", inst.ID, "version", int64(inst.Version))
	}
	if failedOpen {
		p.log.Warn("ready by timeout: some peers do not know our version yet", "node_id", inst.ID, "version", int64(inst.Version), "readiness_timeout", p.cfg.ReadinessTimeout)
	}
	if becameReady || failedOpen {
		p.emit(Event{Kind: EventReady, Instance: inst})
	}
}

func (p *Provider) jitter(d time.Duration) time.Duration {
	p.randMu.Lock()
	defer p.randMu.Unlock()
	return time.Duration(float64(d) * (0.8 + 0.4*p.cfg.Rand.Float64()))
}

// between returns a random duration in [lo, hi].
func (p *Provider) between(lo, hi time.Duration) time.Duration {
	p.randMu.Lock()
	defer p.randMu.Unlock()
	return lo + time.Duration(p.cfg.Rand.Float64()*float64(hi-lo))
}

func (p *Provider) shuffle(s []Slot) {
	p.randMu.Lock()
	defer p.randMu.Unlock()
	p.cfg.Rand.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
}

func (p *Provider) nonce() string {
	p.randMu.Lock()
	defer p.randMu.Unlock()
	return fmt.Sprintf("%016x%016x", p.cfg.Rand.Uint64(), p.cfg.Rand.Uint64())
}
