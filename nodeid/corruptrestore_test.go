package nodeid_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// Issue 23.5: a holder whose object is overwritten with garbage writes its
// version back (If-Match on the garbage's ETag) before it stops, as it does
// after a delete. On main it stopped without: a peer that still knew only
// node 0's previous version (v1) made ForceRelease release at v1, and the
// next taker got v2 again, the version the holder had used.
func TestHolderRestoresItsVersionOverACorruptObject(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		ctx := context.Background()
		repo := newRepo(t, srv, "")
		if err := nodeid.Initialize(ctx, repo, 2, "boot", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		if _, err := nodeid.ForceRelease(ctx, repo, 0, 1, "operator"); err != nil {
			t.Fatal(err) // node 0 released at v1
		}
		putLivePeer(t, srv, 1, nodeid.VersionMappings{0: 1})

		lost := newLossRecorder()
		cfg := fastConfig(t, "holder", 2, lost)
		cfg.AllowedIDs = []int{0}
		holder := newProvider(t, repo, cfg)
		if inst := acquire(t, holder, 10*time.Second); inst != (nodeid.NodeInstance{ID: 0, Version: 2}) {
			t.Fatalf("holder got %v, want node 0 v2", inst)
		}
		putRaw(t, srv, nodeid.LeaseKey(testPrefix, 0), "not a lease", map[string]string{"version": "x"})
		select {
		case <-lost.ch:
		case <-time.After(3 * time.Second):
			t.Fatal("the holder did not notice the corrupt object")
		}
		rec, err := repo.Get(ctx, 0)
		if err != nil || rec.Lease.Instance.Version != 2 || !rec.Lease.Held() || !strings.Contains(rec.Lease.TaskID, "holder") {
			t.Errorf("node 0 after its holder found it corrupt: %+v, %v; want an expiring lease at v2", rec.Lease, err)
		}
		if v, err := nodeid.ForceRelease(ctx, repo, 0, 0, "operator"); err != nil || v != 2 {
			t.Fatalf("ForceRelease after the restore: v%d, %v; want v2 (the next taker gets v3)", v, err)
		}
	})
}

// Issue 23.5: with the object missing or corrupt, what the peers know is no
// floor for the version (the last holder's may be newer): ForceRelease
// needs the operator's version, and never goes below a peer's.
func TestForceReleaseOfAMissingOrCorruptObjectNeedsTheVersion(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		ctx := context.Background()
		repo := newRepo(t, srv, "")
		putLivePeer(t, srv, 2, nodeid.VersionMappings{0: 7})
		for _, state := range []string{"missing", "corrupt"} {
			if state == "corrupt" {
				putRaw(t, srv, nodeid.LeaseKey(testPrefix, 0), "not a lease", map[string]string{"version": "x"})
			}
			if v, err := nodeid.ForceRelease(ctx, repo, 0, 0, "operator"); !errors.Is(err, nodeid.ErrVersionUnknown) {
				t.Fatalf("%s object, a peer records v7, no version given: v%d, %v; want ErrVersionUnknown", state, v, err)
			}
			forceReleasedAt(t, repo, 0, 3, 7, true, state+" object, atLeast 3, a peer records v7")
			deleteRaw(t, srv, nodeid.LeaseKey(testPrefix, 0))
		}
	})
}

// Simulation seed 49732: a scale-down marked the held node 2 unusable, and
// an outside write then tore the body but kept the metadata. The holder's
// restore over the corrupt object put its lease back over the mark, and the
// scaled-down ID was acquirable again. The metadata left in a corrupt object
// still speaks: with acquirable=false, or a version above the holder's, the
// holder stops and leaves the object alone.
func TestHolderLeavesACorruptObjectThatRecordsAScaleDownOrALaterVersion(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		for _, tc := range []struct {
			name, prefix string
			meta         map[string]string
		}{
			{"marked unusable", "unusable/", map[string]string{nodeid.MetaVersion: "1", nodeid.MetaAcquirable: "false"}},
			{"later version", "later/", map[string]string{nodeid.MetaVersion: "5", nodeid.MetaTaskID: "later"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ctx := context.Background()
				repo := newS3Repo(t, srv, "", tc.prefix, 2*time.Second)
				if err := nodeid.Initialize(ctx, repo, 1, "boot", 2*time.Second); err != nil {
					t.Fatal(err)
				}
				lost := newLossRecorder()
				holder := newProvider(t, repo, fastConfig(t, "holder", 1, lost))
				if inst := acquire(t, holder, 10*time.Second); inst != (nodeid.NodeInstance{ID: 0, Version: 1}) {
					t.Fatalf("holder got %v, want node 0 v1", inst)
				}
				key := nodeid.LeaseKey(tc.prefix, 0)
				putRaw(t, srv, key, `{"taskId":"holder","nodeInst`, tc.meta)
				before, err := repo.Get(ctx, 0)
				if !errors.Is(err, nodeid.ErrCorruptLease) {
					t.Fatalf("node 0 after the torn write: %+v, %v; want corrupt", before.Lease, err)
				}
				select {
				case <-lost.ch:
				case <-time.After(3 * time.Second):
					t.Fatal("the holder did not notice the corrupt object")
				}
				time.Sleep(500 * time.Millisecond) // a restore would have landed by now
				after, err := repo.Get(ctx, 0)
				if !errors.Is(err, nodeid.ErrCorruptLease) || after.ETag != before.ETag {
					t.Errorf("node 0 after its holder stopped: %+v, %v; want the corrupt object left as it was", after.Lease, err)
				}
			})
		}
	})
}
