package nodeid

import "context"

// A take in flight and Close (issue 23.8). Close cancels p.ctx under mu; a
// take registers under mu, before it sends, unless p.ctx is already
// cancelled. So each take either sees the Close and sends nothing, or is
// one that Close waits for: its write is seen through to its answer and, if
// it landed, held and released by the renew loop before Close returns.
// Acquire then returns ErrClosed, never a lease that Close released.

// beginTake registers a take about to send its write. ok is false after
// Close; else end must be called when the take has held its lease or given
// up.
func (p *Provider) beginTake() (end func(), ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx.Err() != nil {
		return nil, false
	}
	done := make(chan struct{})
	p.taking = done
	return func() {
		p.mu.Lock()
		p.taking = nil
		p.mu.Unlock()
		close(done)
	}, true
}

// waitTake waits for the take registered when Close cancelled p.ctx, if
// any, or until ctx ends.
func (p *Provider) waitTake(ctx context.Context, take <-chan struct{}) error {
	if take == nil {
		return nil
	}
	select {
	case <-take:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// takeContext is ctx without the cancellation by Close: a write that may
// land is seen through to its answer (each request has its own timeout), so
// that what landed is known and released rather than left to expire. The
// caller's own cancellation still applies.
func (p *Provider) takeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	tctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		if p.ctx.Err() == nil { // ctx ended by the caller, not by Close
			cancel()
		}
	})
	return tctx, func() { stop(); cancel() }
}
