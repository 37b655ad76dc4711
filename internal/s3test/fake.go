package s3test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// Credentials used by every Server. gofakes3 ignores them; VersityGW is
// started with them as its root account.
const (
	accessKey = "nodeidtestaccess"
	secretKey = "nodeidtestsecret0123456789"
	region    = "us-east-1"
)

// FakeOption configures NewFake.
type FakeOption func(*fakeConfig)

type fakeConfig struct {
	clock     func() time.Time
	skewLimit time.Duration
	skewSet   bool
}

// WithServerClock makes the fake read time from now: it sets the objects'
// Last-Modified (HeadObject and ListObjectsV2) and the Date header of
// every response, which is what the lease protocol reads as the server's
// time. now may be called concurrently from many goroutines.
//
// Unless WithTimeSkewLimit is also given, a server clock disables gofakes3's
// check of the request's X-Amz-Date against the server time, so tests can
// move the server clock far from the client's without every request
// failing with RequestTimeTooSkewed.
func WithServerClock(now func() time.Time) FakeOption {
	return func(c *fakeConfig) { c.clock = now }
}

// WithTimeSkewLimit sets how far the request's X-Amz-Date may be from the
// server clock before the fake answers 403 RequestTimeTooSkewed, as AWS S3
// does at 15 minutes (gofakes3's default). Zero disables the check.
func WithTimeSkewLimit(d time.Duration) FakeOption {
	return func(c *fakeConfig) { c.skewLimit, c.skewSet = d, true }
}

// clockSource adapts a clock function to gofakes3.TimeSource.
type clockSource func() time.Time

func (c clockSource) Now() time.Time                  { return c().UTC() }
func (c clockSource) Since(t time.Time) time.Duration { return c().Sub(t) }

// NewFake starts an in-memory gofakes3 server on 127.0.0.1 with one empty
// bucket (Server.Bucket). The server is closed when the test ends.
func NewFake(t testing.TB, opts ...FakeOption) *Server {
	t.Helper()
	var cfg fakeConfig
	for _, o := range opts {
		o(&cfg)
	}

	var backendOpts []s3mem.Option
	fakeOpts := []gofakes3.Option{gofakes3.WithoutVersioning()}
	if cfg.clock != nil {
		ts := clockSource(cfg.clock)
		// The backend stamps objects' LastModified (ListObjectsV2), the
		// front end the Last-Modified header: both need the clock.
		backendOpts = append(backendOpts, s3mem.WithTimeSource(ts))
		fakeOpts = append(fakeOpts, gofakes3.WithTimeSource(ts))
		if !cfg.skewSet {
			fakeOpts = append(fakeOpts, gofakes3.WithTimeSkewLimit(0))
		}
	}
	if cfg.skewSet {
		fakeOpts = append(fakeOpts, gofakes3.WithTimeSkewLimit(cfg.skewLimit))
	}

	var h http.Handler = gofakes3.New(s3mem.New(backendOpts...), fakeOpts...).Server()
	if cfg.clock != nil {
		h = dateHandler(cfg.clock, h)
	}
	// httptest.NewServer listens on 127.0.0.1 (not all interfaces).
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)

	s := &Server{
		Kind:      KindFake,
		URL:       hs.URL,
		AccessKey: accessKey,
		SecretKey: secretKey,
		Region:    region,
	}
	s.Bucket = s.NewBucket(t)
	return s
}

// dateHandler sets the Date response header from now. net/http only adds
// its own Date when the handler has not set one, so setting it before
// gofakes3 writes anything is enough.
func dateHandler(now func() time.Time, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", now().UTC().Format(http.TimeFormat))
		h.ServeHTTP(w, r)
	})
}
