package nodeid_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// heldTakeRepo lets the first take of task through to the server, so it
// lands, then holds its answer until the test lets it go: a Close can land
// between the take's write and its answer.
type heldTakeRepo struct {
	nodeid.Repository
	task   string
	once   sync.Once
	landed chan struct{}
	answer chan struct{}
}

func (r *heldTakeRepo) Write(ctx context.Context, l nodeid.Lease, etag string) (string, error) {
	if l.TaskID != r.task {
		return r.Repository.Write(ctx, l, etag)
	}
	first := false
	r.once.Do(func() { first = true })
	newETag, err := r.Repository.Write(ctx, l, etag)
	if first {
		close(r.landed)
		<-r.answer // the answer arrived; the take has not seen it yet
	}
	return newETag, err
}

// Issue 23.8: a Close between the take's write and its answer returned nil
// at once; Acquire then handed the lease to its caller and the renew loop
// released it behind the caller's back. Close must wait for the take and
// release what it took before it returns; Acquire must fail with ErrClosed.
func TestCloseDuringATakeReleasesItBeforeReturning(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		direct := newRepo(t, srv, "")
		repo := &heldTakeRepo{Repository: direct, task: "taker", landed: make(chan struct{}), answer: make(chan struct{})}
		p := newProvider(t, repo, roomyConfig(t, "taker", 1, nil))
		res := acquireAsync(p)
		select {
		case <-repo.landed:
		case r := <-res:
			t.Fatalf("Acquire returned %v, %v before its take landed", r.inst, r.err)
		case <-time.After(10 * time.Second):
			t.Fatal("no take within 10 s")
		}

		closed := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			closed <- p.Close(ctx)
		}()
		select {
		case err := <-closed:
			close(repo.answer)
			r := <-res
			t.Fatalf("Close returned (%v) while the take's answer was outstanding; Acquire then returned %v, %v", err, r.inst, r.err)
		case <-time.After(300 * time.Millisecond):
		}
		close(repo.answer)
		if err := <-closed; err != nil {
			t.Fatalf("Close: %v", err)
		}
		// Close has returned: the lease it took must be released by now.
		rec, err := direct.Get(context.Background(), 0)
		if err != nil || rec.Lease.Held() || rec.Lease.Instance != (nodeid.NodeInstance{ID: 0, Version: 1}) {
			t.Fatalf("after Close: %+v, %v; want node 0 v1 released", rec.Lease, err)
		}
		r := <-res
		if !errors.Is(r.err, nodeid.ErrClosed) {
			t.Fatalf("Acquire racing Close returned %v, %v; want ErrClosed", r.inst, r.err)
		}
		if p.Valid() || !errors.Is(p.Err(), nodeid.ErrClosed) {
			t.Errorf("after Close: valid=%v err=%v", p.Valid(), p.Err())
		}
		if _, err := p.Acquire(context.Background()); !errors.Is(err, nodeid.ErrClosed) {
			t.Errorf("Acquire after Close: %v, want ErrClosed", err)
		}
	})
}
