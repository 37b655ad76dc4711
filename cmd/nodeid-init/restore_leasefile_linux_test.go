package main_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/efsfs"
	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// A review of 180a4dc (invariant 2): loseThen ran OnFence, logged, emitted
// EventLost, and only after that the restore of a deleted object's version
// and OnLost. run's OnEvent (handleEvent) writes the lease file
// synchronously, under fileMu, on the provider's goroutine: a lease file
// whose directory stalls (the case the design says "cannot delay the kill")
// delays the restore past the old deadline, although S3 answers fine, and
// run exits 3 (awaitLossHandled gives up after L + 2 s) with the object
// gone. The next task recreates it at max(known, 1) and repeats a version.
//
// Schedule (N = 1, L = 2 s, R = 500 ms): tenures a and b release v1, v2;
// holder takes v3 with --lease-file on a FUSE mount. The mount stops
// answering and an operator deletes e2e/0.json. The next renewal gets 404:
// kill (fine), then the EventLost lease-file write hangs, so
// recreateDeleted never runs before the deadline.
func TestStalledLeaseFileDoesNotHoldBackTheRestoreOfADeletedObject(t *testing.T) {
	f := efsfs.MountT(t, efsfs.Profile{})
	c := newCluster(t, s3test.StartVersity(t), 1)
	for _, name := range []string{"a", "b"} {
		if code := c.start(name, nil, "run", "--", "sh", "-c", "exit 0").wait(t, 20*time.Second); code != 0 {
			t.Fatalf("%s exited %d", name, code)
		}
	}
	leaseFile := filepath.Join(f.Dir, "lease.json")
	peersFile := filepath.Join(t.TempDir(), "peers.json")
	tk := c.runTask("holder", "NODEID_LEASE_FILE="+leaseFile, "NODEID_PEERS_FILE="+peersFile)
	if _, v, _ := tk.identity(t, 20*time.Second); v != 3 {
		t.Fatalf("holder got v%d", v)
	}
	f.HangAll()
	t.Cleanup(f.Release)
	deleteObject(t, c.srv, "e2e/0.json")
	// The old deadline is at most L - m = 1.6 s away: by L + 2 s the
	// restore can no longer happen (recreateDeleted is bounded by it).
	time.Sleep(4 * time.Second)
	rec, err := c.repo().Get(context.Background(), 0)
	code := tk.wait(t, 60*time.Second)
	t.Logf("run exited %d", code)
	switch {
	case errors.Is(err, nodeid.ErrNotFound):
		t.Errorf("run (holder of v3, S3 reachable) exited %d without restoring e2e/0.json at its version: the restore waited behind the lease-file write of the loss\n%s",
			code, lastLines(tk.out.String(), 12))
	case err != nil:
		t.Fatal(err)
	case rec.Lease.Instance.Version < 3:
		t.Errorf("after the loss 0.json records v%d, below the holder's v3", rec.Lease.Instance.Version)
	}
	if t.Failed() {
		// The consequence: the next task (no data root to refuse it) gets
		// a version below v3, one that b already used.
		next := c.runTask("next", "NODEID_DATA_ROOT=")
		_, v, _ := next.identity(t, 20*time.Second)
		t.Errorf("the next task got NODE_VERSION=%d after the holder of v3 (versions went down / repeated)", v)
	}
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
