package nodeid

import (
	"context"
	"fmt"
	"log/slog"
	"os"
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
	repo  Repository
	cfg   Config
	log   *slog.Logger
	rules rules // safeRules but in the simulation's teeth tests
	// tlog is log with the tenure's "node_id" and "version", set by hold
	// before the loops start and never changed after.
	tlog *slog.Logger

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
	// published: this tenure's tenure object exists (see hold).
	published bool
	known     VersionMappings
	pending   map[string]time.Time // nonce -> send time of writes not yet answered with success
	// unreadSince: when a rejected renewal first found the object
	// unreadable; zero otherwise.
	unreadSince time.Time
	// renewFails: consecutive failed renewal attempts since the last
	// success, for the "renewal failed" line's attempt.
	renewFails int
	err        error
	relErr     error // why the release on Close failed
	detach     bool  // HandOff: stop without releasing
	// taking is closed when the take in flight ends (closetake.go).
	taking chan struct{}

	done chan struct{} // closed when the tenure ends (lost or closed)
	// The provider's goroutines are held as Litestream holds a Replica's:
	// Close cancels ctx (Acquire stops, the renew loop releases) and waits
	// for loops (renew loop, watchdog, refresh loop).
	ctx    context.Context
	cancel context.CancelFunc
	loops  sync.WaitGroup

	seen observations // rule 2; used by Acquire only
	// Used by Acquire only: the highest version of each node seen in any
	// lease read while acquiring, and the cluster marker once read.
	acqKnown VersionMappings
	marker   *ClusterMarker

	stats providerStats
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
		rules:    rulesOf(repo),
		cfg:      cfg,
		log:      cfg.Logger.With("task_id", cfg.TaskID),
		done:     make(chan struct{}),
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
	p.ctx, p.cancel = context.WithCancel(context.Background())
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

// Close stops renewing and releases the lease with If-Match, so a successor
// can take the ID at once with version+1 and knows we stopped cleanly. Stop
// writing data before calling Close. A failed release is logged and
// returned; the lease then simply expires. Close on a provider that is
// acquiring makes Acquire return ErrClosed; a take whose write is in flight
// is waited for and what it took released. Close waits, until ctx ends, for
// the provider's goroutines to finish.
func (p *Provider) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.state == stateIdle {
		p.state = stateClosed
	}
	p.cancel() // under mu: see beginTake
	take := p.taking
	p.mu.Unlock()
	if err := p.waitTake(ctx, take); err != nil {
		return err
	}
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
