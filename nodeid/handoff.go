package nodeid

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/nodeid/nodeid/clock"
)

// systemBoottime is the host's CLOCK_BOOTTIME; the simulation replaces it
// with its own true time, as it replaces every clock.
var systemBoottime = clock.SystemBoottime

// systemBootID reads this host's boot ID; tests replace it.
var systemBootID = readBootID

func readBootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", errors.New("empty boot ID")
	}
	return id, nil
}

// Handoff carries a held lease from one process to another on the same host:
// from an ECS init container that acquired it to the sidecar or the embedded
// provider that keeps renewing it. The deadline travels as a CLOCK_BOOTTIME
// reading, which every process of the host shares, so the adopter inherits
// exactly the validity the acquirer had, never more.
type Handoff struct {
	TaskID               string          `json:"taskId"`
	ClusterSize          int             `json:"clusterSize"`
	Instance             NodeInstance    `json:"nodeInstance"`
	ETag                 string          `json:"etag"`
	PreviousGraceful     bool            `json:"previousGraceful"`
	KnownVersions        VersionMappings `json:"knownVersionMappings"`
	ValidUntilBoottimeNs int64           `json:"validUntilBoottimeNs"`
	// RenewalSentBoottimeNs is when the write that earned that deadline
	// was sent: the adopter never inherits more than L - m from it.
	RenewalSentBoottimeNs int64 `json:"renewalSentBoottimeNs"`
	// BootID is the host's boot ID when the hand-off was made: both
	// readings above are of that boot's CLOCK_BOOTTIME. Adopt refuses a
	// hand-off without one or with another.
	BootID string `json:"bootId"`
	// LeaseDurationMs is the acquirer's lease duration, which its writes
	// record; the adopter must use the same.
	LeaseDurationMs int64 `json:"leaseDurationMs,omitempty"`
	// Pending are the renewals whose answer was lost: any of them may have
	// landed, so the ETag above may be stale. The adopter recognises its
	// predecessor's landed write by the nonce instead of taking it for an
	// overwrite and stopping a healthy task.
	Pending []PendingWrite `json:"pending,omitempty"`
}

// PendingWrite is a renewal sent whose answer was lost.
type PendingWrite struct {
	Nonce          string `json:"nonce"`
	SentBoottimeNs int64  `json:"sentBoottimeNs"`
}

// HandOff stops renewing without releasing and returns what another process
// needs to adopt the lease with Adopt. From here on this provider is closed.
// If nobody adopts the lease, it expires like a crashed holder's.
func (p *Provider) HandOff(ctx context.Context) (Handoff, error) {
	return p.handOff(ctx, true)
}

// LeaveToExpire is HandOff for a lease nobody will adopt: it stops renewing
// without releasing, so the lease expires like a crashed holder's. It logs
// nothing: "handed off" would be wrong, and the caller knows why.
func (p *Provider) LeaveToExpire(ctx context.Context) error {
	_, err := p.handOff(ctx, false)
	return err
}

func (p *Provider) handOff(ctx context.Context, logIt bool) (Handoff, error) {
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
	bootID, _ := systemBootID() // without one, Adopt refuses the hand-off
	// Read the host clock first: a pause between the two readings then
	// shortens the inherited validity instead of stretching it.
	boot := systemBoottime()
	now := p.cfg.Clock.Now()
	left := p.deadline.Sub(now)
	// The deadline is validUntil of the write that earned it (ours, or an
	// adopted one's, capped): its send time is L - m before it, or earlier.
	sentAgo := p.cfg.LeaseDuration - p.cfg.SafetyMargin - left
	if left <= 0 {
		return Handoff{}, &LostError{Instance: p.instance, Reason: "self-fence deadline passed during the hand-off"}
	}
	h := Handoff{
		TaskID:               p.cfg.TaskID,
		ClusterSize:          p.clusterSize(),
		Instance:             p.instance,
		ETag:                 p.etag,
		PreviousGraceful:     p.graceful,
		KnownVersions:        p.known.Clone(),
		ValidUntilBoottimeNs: int64(boot + left),
		LeaseDurationMs:      p.cfg.LeaseDuration.Milliseconds(),
	}
	h.RenewalSentBoottimeNs, h.BootID = int64(boot-sentAgo), bootID
	for nonce, sent := range p.pending {
		h.Pending = append(h.Pending, PendingWrite{Nonce: nonce, SentBoottimeNs: int64(boot - now.Sub(sent))})
	}
	sort.Slice(h.Pending, func(i, j int) bool { return h.Pending[i].Nonce < h.Pending[j].Nonce })
	if logIt {
		p.tlog.Info("handed off node id", "valid_for_seconds", logSeconds(left))
	}
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
	if h.LeaseDurationMs != 0 && time.Duration(h.LeaseDurationMs)*time.Millisecond != p.cfg.LeaseDuration {
		// A renewal of the predecessor whose answer was lost is credited
		// with our validity, but it recorded its own duration: a longer one
		// of ours could outlast what waiters read from it.
		return NodeInstance{}, fmt.Errorf("%w: hand-off made with lease duration %v, this process has %v; use the same in both", ErrInvalidConfig, time.Duration(h.LeaseDurationMs)*time.Millisecond, p.cfg.LeaseDuration)
	}
	if h.ETag == "" || h.Instance.Version < 1 {
		return NodeInstance{}, fmt.Errorf("%w: hand-off without an ETag or version", ErrInvalidConfig)
	}
	if err := checkHandoffBoot(h); err != nil {
		return NodeInstance{}, err
	}
	// Read our clock first: a pause between the two readings then shortens
	// the inherited validity instead of stretching it.
	now := p.cfg.Clock.Now()
	boot := systemBoottime()
	if err := checkHandoffSends(h, boot); err != nil {
		return NodeInstance{}, err
	}
	left := p.rules.inherited(h, boot, p.cfg.LeaseDuration, p.cfg.SafetyMargin)
	if left <= 0 {
		return NodeInstance{}, &LostError{Instance: h.Instance, Reason: fmt.Sprintf("hand-off expired %v ago", (-left).Round(time.Millisecond))}
	}
	t := tenure{inst: h.Instance, etag: h.ETag, deadline: now.Add(left), acquired: now, graceful: h.PreviousGraceful,
		known: h.KnownVersions.Clone(), pending: map[string]time.Time{}}
	if t.known == nil {
		t.known = VersionMappings{}
	}
	t.known.Observe(h.Instance.ID, h.Instance.Version)
	for _, w := range h.Pending {
		t.pending[w.Nonce] = now.Add(time.Duration(w.SentBoottimeNs) - boot)
	}
	switch err := p.hold(stateIdle, t, true); {
	case errors.Is(err, errNotFrom):
		return NodeInstance{}, errors.New("nodeid: Adopt on a provider that is not idle")
	case err != nil:
		return NodeInstance{}, p.Err()
	}
	deadline, _ := p.Deadline()
	p.tlog.Info("adopted node id")
	p.emit(Event{Kind: EventAcquired, Instance: h.Instance, Deadline: deadline, Graceful: h.PreviousGraceful})
	return h.Instance, nil
}

// checkHandoffBoot refuses a hand-off made on another boot: its deadlines
// are readings of another CLOCK_BOOTTIME (another host, or this one before a
// reboot), which may lie an hour ahead of ours. Without a boot ID to compare,
// on either side, it is refused too.
func checkHandoffBoot(h Handoff) error {
	ours, err := systemBootID()
	switch {
	case err != nil:
		return fmt.Errorf("%w: %w: this host's boot ID cannot be read: %w", ErrInvalidConfig, ErrHandoffOtherBoot, err)
	case h.BootID == "":
		return fmt.Errorf("%w: %w: the hand-off records no boot ID", ErrInvalidConfig, ErrHandoffOtherBoot)
	case h.BootID != ours:
		return fmt.Errorf("%w: %w: made on boot %s, this is boot %s", ErrInvalidConfig, ErrHandoffOtherBoot, h.BootID, ours)
	}
	return nil
}

// checkHandoffSends refuses a hand-off whose send times no renewal of this
// boot can have: none recorded, or later than boot (now).
func checkHandoffSends(h Handoff, boot time.Duration) error {
	if h.RenewalSentBoottimeNs <= 0 {
		return fmt.Errorf("%w: hand-off without the send time of its last renewal", ErrInvalidConfig)
	}
	sends := []int64{h.RenewalSentBoottimeNs}
	for _, w := range h.Pending {
		sends = append(sends, w.SentBoottimeNs)
	}
	for _, s := range sends {
		if time.Duration(s) > boot {
			return fmt.Errorf("%w: hand-off with a renewal sent %v from now", ErrInvalidConfig, time.Duration(s)-boot)
		}
	}
	return nil
}
