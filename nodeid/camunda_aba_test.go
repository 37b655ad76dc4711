package nodeid_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/nodeid/nodeid/datadir"
	"github.com/nodeid/nodeid/internal/camunda"
	"github.com/nodeid/nodeid/internal/faultproxy"
	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// The residual race of mixed operation (docs/design.md, "Mixed operation
// with Camunda 8.9", condition 3), as a schedule:
//
//	t0  node 0 is Camunda-released at v2: an empty body, ETag E (every
//	    empty body's). A nodeid task waits it out and sends its take,
//	    If-Match E, at v3 (1 + the highest version recorded).
//	t1  the take is delayed in the network. Meanwhile a Camunda broker
//	    takes node 0 at v3, prepares node-0/v3 and releases: empty, ETag E.
//	t2  the take lands (E matches again): the nodeid task holds v3, a
//	    version Camunda used. The two never held the ID at once.
//	t3  its data directory step refuses node-0/v3, which exists: the task
//	    stops before using the version, instead of sharing its directory.
func TestCamundaTenureInsideATakeFlightIsStoppedByTheDataRoot(t *testing.T) {
	srv := s3test.NewFake(t)
	ctx := context.Background()
	client := camundaBucket(t, srv, 1)
	if _, err := camunda.WriteReleased(ctx, client, srv.Bucket, 0, 2, true); err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, srv)
	proxy.Set(faultproxy.Fault{Blackhole: true, Methods: []string{http.MethodPut}})

	cfg := fastConfig(t, "nodeid-late", 1, nil)
	cfg.LeaseDuration, cfg.RenewInterval, cfg.SafetyMargin, cfg.RequestTimeout = 4*time.Second, 1300*time.Millisecond, 800*time.Millisecond, 1200*time.Millisecond
	p := newProvider(t, rootRepoAt(t, srv, proxy.URL), cfg)
	type result struct {
		inst nodeid.NodeInstance
		err  error
	}
	done := make(chan result, 1)
	go func() {
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		inst, err := p.Acquire(actx)
		done <- result{inst, err}
	}()
	waitFor(t, 15*time.Second, "the take to be sent", func() bool { return proxy.Stats().Blackholed > 0 })

	// A whole Camunda tenure while the take is in flight.
	root := t.TempDir()
	c := &camunda.Broker{Client: client, Bucket: srv.Bucket, TaskID: "camunda-fast", N: 1, LeaseDuration: 15 * time.Second}
	id, v, err := c.Acquire(ctx)
	if err != nil || id != 0 || v != 3 {
		t.Fatalf("camunda: node %d v%d, %v", id, v, err)
	}
	if _, _, err := datadir.Prepare(ctx, root, nodeid.NodeInstance{ID: 0, Version: 3}, datadir.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
	proxy.Pass()

	r := <-done
	if r.err != nil {
		t.Fatalf("acquire: %v", r.err)
	}
	if r.inst != (nodeid.NodeInstance{ID: 0, Version: 3}) {
		// The race did not happen as scheduled; nothing to check.
		t.Fatalf("nodeid took %v; the schedule expects node 0 v3", r.inst)
	}
	_, _, err = datadir.Prepare(ctx, root, r.inst, datadir.Options{})
	if !errors.Is(err, datadir.ErrVersionUsed) {
		t.Fatalf("the data root let a second holder prepare v3: %v", err)
	}
}

// rootRepoAt is rootRepo through endpoint (a fault proxy).
func rootRepoAt(t testing.TB, srv *s3test.Server, endpoint string) *nodeid.S3Repository {
	t.Helper()
	return newS3Repo(t, srv, endpoint, "", 2*time.Second)
}
