package nodeid_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// credsGoneRepo fails every request with the "no usable credentials" error
// classify produces, once gone is set (credentials expired mid-tenure).
type credsGoneRepo struct {
	nodeid.Repository
	gone *atomic.Bool
}

func (r credsGoneRepo) err() error {
	return &nodeid.StorageError{Op: "write", Kind: nodeid.ErrAccessDenied, Code: "NoCredentials", Err: errors.New("get identity: get credentials: expired")}
}

func (r credsGoneRepo) Write(ctx context.Context, l nodeid.Lease, etag string) (string, error) {
	if r.gone.Load() {
		return "", r.err()
	}
	return r.Repository.Write(ctx, l, etag)
}

func (r credsGoneRepo) Get(ctx context.Context, id int) (nodeid.Record, error) {
	if r.gone.Load() {
		return nodeid.Record{}, r.err()
	}
	return r.Repository.Get(ctx, id)
}

// Sound (passes): credentials that expire mid-tenure neither stop the
// holder at once nor keep it valid: it retries and self-fences by its
// deadline, and OnLost runs.
func TestCredentialsExpiringMidTenureSelfFence(t *testing.T) {
	srv := s3test.NewFake(t)
	direct := newRepo(t, srv, "")
	var gone atomic.Bool
	lost := newLossRecorder()
	p := newProvider(t, credsGoneRepo{Repository: direct, gone: &gone}, fastConfig(t, "holder", 1, lost))
	acquire(t, p, 5*time.Second)
	gone.Store(true)
	deadline, _ := p.Deadline()
	waitFor(t, 3*time.Second, "self-fence", func() bool { return !p.Valid() })
	if late := time.Since(deadline); late > 100*time.Millisecond {
		t.Fatalf("valid %v past its deadline", late)
	}
	waitFor(t, 2*time.Second, "OnLost", func() bool { return lost.count() > 0 })
}
