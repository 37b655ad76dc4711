package nodeid

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nodeid/nodeid/clock"
)

// Handoff carries a held lease from one process to another on the same host:
// from an ECS init container that acquired it to the sidecar or the embedded
// provider that keeps renewing it. The deadline travels as a CLOCK_MONOTONIC
// reading, which every process of the host shares, so the adopter inherits
// exactly the validity the acquirer had, never more.
type Handoff struct {
	TaskID                string          `json:"taskId"`
	ClusterSize           int             `json:"clusterSize"`
	Instance              NodeInstance    `json:"nodeInstance"`
	ETag                  string          `json:"etag"`
	PreviousGraceful      bool            `json:"previousGraceful"`
	KnownVersions         VersionMappings `json:"knownVersionMappings"`
	ValidUntilMonotonicNs int64           `json:"validUntilMonotonicNs"`
}

// HandOff stops renewing without releasing and returns what another process
// needs to adopt the lease with Adopt. From here on this provider is closed.
// If nobody adopts the lease, it expires like a crashed holder's.
func (p *Provider) HandOff(ctx context.Context) (Handoff, error) {
	p.mu.Lock()
	if p.state != stateHolding {
		p.mu.Unlock()
		return Handoff{}, fmt.Errorf("nodeid: hand-off without a held lease: %w", errors.Join(ErrClosed, p.Err()))
	}
	p.detach = true
	p.mu.Unlock()
	if err := p.Close(ctx); err != nil { // waits for an in-flight renewal
		return Handoff{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !errors.Is(p.err, ErrClosed) {
		return Handoff{}, p.err // lost before the renew loop stopped
	}
	left := p.deadline.Sub(p.cfg.Clock.Now())
	if left <= 0 {
		return Handoff{}, &LostError{Instance: p.instance, Reason: "self-fence deadline passed during the hand-off"}
	}
	h := Handoff{
		TaskID:                p.cfg.TaskID,
		ClusterSize:           p.cfg.ClusterSize,
		Instance:              p.instance,
		ETag:                  p.etag,
		PreviousGraceful:      p.graceful,
		KnownVersions:         p.known.Clone(),
		ValidUntilMonotonicNs: int64(clock.SystemMonotonic() + left),
	}
	p.log.Info("handed off node id", "node_id", h.Instance.ID, "version", int64(h.Instance.Version), "valid_for", left.Round(time.Millisecond))
	p.emit(Event{Kind: EventHandedOff, Instance: h.Instance})
	return h, nil
}

// Adopt takes over a lease handed off by another process of the same task
// (same TaskID) instead of acquiring one. It renews at once; if the lease
// was taken or changed meanwhile, the renewal fails with 412 and Adopt
// returns the loss. A hand-off whose deadline has passed is refused: a lease
// that was not renewed in time stays lost.
func (p *Provider) Adopt(ctx context.Context, h Handoff) (NodeInstance, error) {
	if h.TaskID != p.cfg.TaskID {
		return NodeInstance{}, fmt.Errorf("%w: hand-off of task %q, this task is %q", ErrInvalidConfig, h.TaskID, p.cfg.TaskID)
	}
	if h.ETag == "" || h.Instance.Version < 1 {
		return NodeInstance{}, fmt.Errorf("%w: hand-off without an ETag or version", ErrInvalidConfig)
	}
	left := time.Duration(h.ValidUntilMonotonicNs) - clock.SystemMonotonic()
	if left <= 0 {
		return NodeInstance{}, &LostError{Instance: h.Instance, Reason: fmt.Sprintf("hand-off expired %v ago", (-left).Round(time.Millisecond))}
	}
	p.mu.Lock()
	if p.state != stateIdle {
		p.mu.Unlock()
		return NodeInstance{}, errors.New("nodeid: Adopt on a provider that is not idle")
	}
	now := p.cfg.Clock.Now()
	p.state = stateHolding
	p.instance = h.Instance
	p.etag = h.ETag
	p.deadline = now.Add(left)
	p.acquired = now
	p.graceful = h.PreviousGraceful
	p.known = h.KnownVersions.Clone()
	if p.known == nil {
		p.known = VersionMappings{}
	}
	p.known.Observe(h.Instance.ID, h.Instance.Version)
	p.ready = h.PreviousGraceful || p.cfg.ReadinessTimeout == 0
	p.mu.Unlock()

	// The watchdog guards the first renewal too.
	p.loops.Add(1)
	go func() { defer p.loops.Done(); p.watchdog() }()
	next, ok := p.renew()
	if !ok {
		return NodeInstance{}, p.Err()
	}
	p.loops.Add(2)
	go func() { defer p.loops.Done(); p.renewLoop(next) }()
	go func() { defer p.loops.Done(); p.refreshLoop() }()
	deadline, _ := p.Deadline()
	p.log.Info("adopted node id", "node_id", h.Instance.ID, "version", int64(h.Instance.Version))
	p.emit(Event{Kind: EventAcquired, Instance: h.Instance, Deadline: deadline, Graceful: h.PreviousGraceful})
	return h.Instance, nil
}
