package nodeid_test

// Adversarial review: the lease protocol against legacy (empty-body)
// objects, as an older version of this tool or Camunda 8.9 writes them.

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/nodeid/nodeid/faultproxy"
	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// legacyReleased is the empty body and metadata of a released lease as an
// older writer leaves it: every such object has the ETag MD5("") =
// d41d8cd98f00b204e9800998ecf8427e, whatever its version metadata says.
func legacyReleased(version string) (string, map[string]string) {
	return "", map[string]string{"taskid": "", "version": version, "acquirable": "true"}
}

// Schedule: node 0 is released by a legacy writer at v1 (empty body). The
// new task "late" reads it and sends its take PUT with If-Match d41d8...,
// which the network holds for 1.5 s. Meanwhile the legacy writer's tasks
// take and release v2, v3, v4, each release again an empty body, so the
// object is back at ETag d41d8... with version metadata 4. The late PUT
// lands (its If-Match matches) and "late" holds node 0 at version 2: the
// version went from 4 back to 2 and v2 is handed out a second time
// (invariant 2). Schedule 1 of design.md, left open for legacy bodies: the
// take still uses If-Match on an ETag that names many states.
func TestReviewLegacyReleasedABAHandsOutAnOldVersion(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		direct := newRepo(t, srv, "")
		key := nodeid.LeaseKey(testPrefix, 0)
		body, meta := legacyReleased("1")
		putRaw(t, srv, key, body, meta)
		// The cluster marker exists (created from this listing), so the late
		// task's only PUT is its take.
		if err := nodeid.Initialize(context.Background(), direct, 1, "bootstrap", 2*time.Second); err != nil {
			t.Fatal(err)
		}

		const delay = 1500 * time.Millisecond
		proxy := startProxy(t, srv)
		proxy.Set(faultproxy.Fault{Methods: []string{http.MethodPut}, Latency: delay})
		late := newProvider(t, newRepo(t, srv, proxy.URL), slowTakeConfig(t, "late", 1, delay))
		got := acquireAsync(late)
		waitFor(t, 5*time.Second, "the late task's take PUT in the proxy", func() bool { return proxy.Stats().Delayed >= 1 })
		proxy.Pass()

		// The legacy tool's tenures v2..v4, each ending in an empty-body release.
		for v := 2; v <= 4; v++ {
			hb, hm := foreignLease("legacy-task", 0, int64(v))
			putRaw(t, srv, key, hb, hm)
			rb, rm := legacyReleased(strconv.Itoa(v))
			putRaw(t, srv, key, rb, rm)
		}

		res := <-got
		if res.err != nil {
			t.Fatalf("late task: %v", res.err)
		}
		if res.inst.Version <= 4 {
			t.Fatalf("the late task holds %v after v4 was handed out: the version went back from 4 to %d and v%d was handed out twice",
				res.inst, res.inst.Version, res.inst.Version)
		}
	})
}
