package nodeid_test

// The lease protocol against legacy (empty-body) objects, as an older version
// of this tool or Camunda 8.9 writes them.

import (
	"context"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// legacyReleased is the empty body and metadata of a released lease as an
// older writer leaves it: every such object has the ETag MD5("") =
// d41d8cd98f00b204e9800998ecf8427e, whatever its version metadata says.
func legacyReleased(version string) (string, map[string]string) {
	return "", map[string]string{"taskid": "", "version": version, "acquirable": "true"}
}

// From an adversarial review. Schedule: node 0 is released by a legacy
// writer at v1 (empty body). The new task "late" reads it and sends its take
// PUT with If-Match d41d8..., which the network holds for 1.5 s. Meanwhile
// the legacy writer's tasks take and release v2, v3, v4, each release again
// an empty body, so the object is back at ETag d41d8... with version 4. The
// late PUT lands: "late" held v2 after v4 (invariant 2).
//
// No conditional write can tell two empty states apart, so mixed operation
// with a writer of empty bodies is refused by documentation (docs/
// operations.md: stop the old version first). What the protocol does: a
// legacy object is judged like a held lease, so it is taken only once it has
// been quiet for a lease duration (L + 1 s by the server's clock), and never
// as a graceful release. A legacy tenure that starts and ends inside the
// flight time of the take PUT still slips through (docs/design.md).
func TestLegacyReleasedObjectIsTakenOnlyWhenQuietAndNotGracefully(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		direct := newRepo(t, srv, "")
		key := nodeid.LeaseKey(testPrefix, 0)
		body, meta := legacyReleased("3")
		putRaw(t, srv, key, body, meta)
		written := time.Now()
		if err := nodeid.Initialize(context.Background(), direct, 1, "bootstrap", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		p := newProvider(t, direct, fastConfig(t, "new", 1, nil))
		res := <-acquireAsync(p)
		if res.err != nil {
			t.Fatal(res.err)
		}
		// L = 2 s: quiet means Date - Last-Modified >= 3 s by the server's
		// whole-second clock, or 2 s of local observation of the same ETag.
		if waited := time.Since(written); waited < 2*time.Second {
			t.Fatalf("took %v %v after a legacy write, before it had been quiet for a lease duration", res.inst, waited)
		}
		if res.inst.Version != 4 || p.PreviousGracefullyShutdown() {
			t.Fatalf("took %v (previous_graceful=%v) over a legacy release at v3, want v4 and not graceful", res.inst, p.PreviousGracefullyShutdown())
		}
	})
}
