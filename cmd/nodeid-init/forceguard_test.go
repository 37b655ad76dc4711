package main_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// release runs `release --node N --force` with args and returns its exit
// code and output.
func (c *cluster) release(t *testing.T, node string, args ...string) (int, string) {
	t.Helper()
	tk := c.start("operator", nil, append([]string{"release", "--node", node, "--force"}, args...)...)
	return tk.wait(t, 20*time.Second), tk.out.String()
}

// Issue 23.5: node 0's object is corrupt and the peer on node 1 knows only
// v1 of it, while its last holder may have had a newer one. release
// --force needs --version (or a data root that has the version); on main
// it released at v1.
func TestReleaseOfACorruptObjectNeedsTheVersionEvenIfAPeerKnowsOne(t *testing.T) {
	forBothServers(t, func(t *testing.T, srv *s3test.Server) {
		c := newCluster(t, srv, 2)
		ctx := context.Background()
		if err := nodeid.Initialize(ctx, c.repo(), 2, "boot", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		peer := nodeid.Lease{TaskID: "peer", Instance: nodeid.NodeInstance{ID: 1, Version: 1},
			Expires: time.Now().Add(time.Hour), Duration: 2 * time.Second, Nonce: "n1", Acquirable: true,
			KnownVersions: nodeid.VersionMappings{0: 1}}
		body, meta := peer.Encode()
		replaceObject(t, srv, nodeid.LeaseKey("e2e/", 1), body, meta)
		replaceObject(t, srv, nodeid.LeaseKey("e2e/", 0), []byte("not a lease"), map[string]string{"version": "x"})

		if code, out := c.release(t, "0", "--yes"); code != 2 || !strings.Contains(out, "pass --version V or --data-root DIR") || strings.Count(strings.TrimSpace(out), "\n") > 0 {
			t.Errorf("corrupt object, a peer knows v1, no version: exit %d, want 2 and one line asking for --version:\n%s", code, out)
		}
		if code, out := c.release(t, "0", "--yes", "--data-root", t.TempDir()); code != 2 || !strings.Contains(out, "has no valid node-0/vK") {
			t.Errorf("corrupt object, an empty data root: exit %d, want 2:\n%s", code, out)
		}
		if rec, err := c.repo().Get(ctx, 0); err == nil {
			t.Fatalf("a refused release wrote node 0: %+v", rec.Lease)
		}
		if code, out := c.release(t, "0", "--yes", "--version", "2"); code != 0 || !strings.Contains(out, "released at version 2") {
			t.Errorf("corrupt object, --version 2: exit %d:\n%s", code, out)
		}
	})
}

// Issue 23.4: a corrupt, missing or unusable (scaled-down) object names no
// holder the guard can judge, but its last holder may still be valid: the
// write that made it so landed less than a lease duration + 1 s ago by S3's
// clock (for a missing object nothing tells). release --force refuses
// without --yes (exit 2) and goes ahead with it; a corrupt object written
// long enough ago is released without --yes. On main all three went ahead
// at once.
func TestReleaseForceOfAnUnjudgeableObjectWantsYesWhileItsHolderMayBeValid(t *testing.T) {
	forBothServers(t, func(t *testing.T, srv *s3test.Server) {
		c := newCluster(t, srv, 2)
		ctx := context.Background()
		repo := c.repo()
		if err := nodeid.Initialize(ctx, repo, 2, "boot", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		refusedThenYes := func(what, node string, args ...string) {
			t.Helper()
			if code, out := c.release(t, node, args...); code != 2 || !strings.Contains(out, "its last holder may still be valid; add --yes") {
				t.Errorf("%s without --yes: exit %d, want 2:\n%s", what, code, out)
			}
			if code, out := c.release(t, node, append(args, "--yes")...); code != 0 || !strings.Contains(out, "released at version") {
				t.Errorf("%s with --yes: exit %d, want 0:\n%s", what, code, out)
			}
		}

		replaceObject(t, srv, nodeid.LeaseKey("e2e/", 0), []byte("not a lease"), map[string]string{"version": "x"})
		refusedThenYes("a corrupt object written just now", "0", "--version", "3")

		deleteObject(t, srv, nodeid.LeaseKey("e2e/", 0))
		refusedThenYes("a missing object", "0", "--version", "4")

		if err := nodeid.Scale(ctx, repo, 1, "admin", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		refusedThenYes("an object scaled down just now", "1")

		replaceObject(t, srv, nodeid.LeaseKey("e2e/", 0), []byte("not a lease"), map[string]string{"version": "x"})
		time.Sleep(4 * time.Second) // L = 2 s: past L + 1 s by S3's clock
		if code, out := c.release(t, "0", "--version", "5"); code != 0 || !strings.Contains(out, "released at version 5") {
			t.Errorf("a corrupt object written 4 s ago, without --yes: exit %d, want 0:\n%s", code, out)
		}
	})
}
