package nodeid

import (
	"context"
	"errors"
	"time"
)

// ReleaseHintKey names the object a graceful releaser rewrites after its
// release, <prefix>nodeid-released: waiting tasks read it (HEAD, priced as
// a GET) every PollInterval and list the leases only when it changed, or
// every SpareListInterval (docs/design.md, "A waiting task's poll"). It is
// a hint: nothing decides by it.
const ReleaseHintKey = "nodeid-released"

// ReleaseHintRepository is a Repository with the release hint. It is
// optional: without it a waiting task lists every PollInterval.
type ReleaseHintRepository interface {
	Repository
	// ReleaseHint returns the hint's ETag (ErrNotFound when there is none).
	ReleaseHint(ctx context.Context) (string, error)
	// SignalRelease changes the hint: a conditional write over the ETag
	// read, or a create. A write that loses a race is success: the hint
	// changed either way.
	SignalRelease(ctx context.Context) error
}

// signalRelease changes the release hint after our release landed, bounded
// by T; a failure only delays waiting tasks until their next listing.
func (p *Provider) signalRelease() {
	h, ok := p.repo.(ReleaseHintRepository)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.RequestTimeout)
	defer cancel()
	if err := h.SignalRelease(ctx); err != nil {
		p.tlog.Debug("release hint not written; waiting tasks see the release at their next listing", "err", err)
	}
}

// spareHint tells a waiting task whether to list again: the hint changed
// since the last listing, or it cannot be read, or SpareListInterval passed.
type spareHint struct {
	h        ReleaseHintRepository
	etag     string // as read before the last listing; "" none
	listedAt time.Time
	armed    bool // a listing found nothing free: polls may skip listings
}

// beforeListing reads the hint, so that a release landing after the
// listing changes it from what we saw.
func (s *spareHint) beforeListing(ctx context.Context, p *Provider) {
	if s.h == nil {
		return
	}
	s.etag = s.read(ctx, p)
	s.listedAt = p.cfg.Clock.Now()
}

func (s *spareHint) read(ctx context.Context, p *Provider) string {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	etag, err := s.h.ReleaseHint(ctx)
	switch {
	case errors.Is(err, ErrNotFound):
		return ""
	case err != nil:
		return "unreadable"
	}
	return etag
}

// skipListing reports whether this poll may skip the listing.
func (s *spareHint) skipListing(ctx context.Context, p *Provider) bool {
	if s.h == nil || !s.armed || p.cfg.Clock.Now().Sub(s.listedAt) >= p.cfg.SpareListInterval {
		return false
	}
	now := s.read(ctx, p)
	return now == s.etag && now != "unreadable"
}
