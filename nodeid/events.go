package nodeid

import "time"

// EventKind names a state change of a provider.
type EventKind int

// Events, in the order a tenure meets them.
const (
	EventAcquireAttempt EventKind = iota // a conditional PUT to take an ID was sent
	EventAcquired                        // an ID is held
	EventReady                           // Ready turned true
	EventRenewed                         // a renewal succeeded
	EventRenewalFailed                   // a renewal attempt failed (the lease may still be valid)
	EventLost                            // the lease was lost
	EventReleased                        // the lease was released on Close
	EventHandedOff                       // the lease was handed off to another process
)

func (k EventKind) String() string {
	switch k {
	case EventAcquireAttempt:
		return "acquire-attempt"
	case EventAcquired:
		return "acquired"
	case EventReady:
		return "ready"
	case EventRenewed:
		return "renewed"
	case EventRenewalFailed:
		return "renewal-failed"
	case EventLost:
		return "lost"
	case EventReleased:
		return "released"
	case EventHandedOff:
		return "handed-off"
	}
	return "unknown"
}

// Event describes one state change, for metrics and supervisors.
type Event struct {
	Kind     EventKind
	Instance NodeInstance
	// Deadline is the self-fence deadline in force after the event, as a
	// reading of the provider's clock (Acquired, Renewed).
	Deadline time.Time
	// Latency is the renewal's round trip (Renewed, RenewalFailed) or the
	// time Acquire took (Acquired).
	Latency time.Duration
	// Graceful is PreviousGracefullyShutdown (Acquired).
	Graceful bool
	// SelfFence is true when a loss came from the self-fence deadline.
	SelfFence bool
	Err       error
}

// emit delivers e to Config.OnEvent. It is called without the provider's
// lock held; handlers must not block.
func (p *Provider) emit(e Event) {
	if p.cfg.OnEvent != nil {
		p.cfg.OnEvent(e)
	}
}
