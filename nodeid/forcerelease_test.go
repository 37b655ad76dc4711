package nodeid_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// forceReleasedAt force-releases node id with the operator's floor atLeast
// and checks that it was released at version want, and reads back so.
func forceReleasedAt(t *testing.T, repo nodeid.Repository, id int, atLeast, want nodeid.Version, acquirable bool, what string) {
	t.Helper()
	if v, err := nodeid.ForceRelease(context.Background(), repo, id, atLeast, "operator"); err != nil || v != want {
		t.Fatalf("%s: v%d, %v; want v%d", what, v, err, want)
	}
	forced(t, repo, id, want, acquirable)
}

// forced checks that node id reads back as a forced release at version v
// with the given acquirability.
func forced(t *testing.T, repo nodeid.Repository, id int, v nodeid.Version, acquirable bool) {
	t.Helper()
	rec, err := repo.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("after ForceRelease: %v", err)
	}
	l := rec.Lease
	if l.Held() || !l.Forced || l.Instance.Version != v || l.Acquirable != acquirable || l.Writer != "operator" {
		t.Fatalf("after ForceRelease: %+v; want released by operator, forced, v%d, acquirable %v", l, v, acquirable)
	}
}

// ForceRelease of a live holder: released at the holder's version (never
// lower, even with a lower atLeast), marked forced; the holder's next
// renewal fails and it fences itself; the next taker gets version + 1 and
// does not count the release as graceful.
func TestForceReleaseOfAHeldLease(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		repo := newRepo(t, srv, "")
		cycle(t, repo, "a", 1) // node 0 at v1
		cycle(t, repo, "b", 1) // node 0 at v2
		lost := newLossRecorder()
		holder := newProvider(t, repo, fastConfig(t, "holder", 1, lost))
		held := acquire(t, holder, 10*time.Second)
		if held.ID != 0 || held.Version != 3 {
			t.Fatalf("holder got %v, want node 0 v3", held)
		}

		forceReleasedAt(t, repo, 0, 1, 3, true, "ForceRelease")
		select {
		case err := <-lost.ch:
			if !errors.Is(err, nodeid.ErrLeaseLost) {
				t.Errorf("holder lost with %v, want ErrLeaseLost", err)
			}
		case <-time.After(2 * time.Second): // a renewal interval and its timeout, with room
			t.Fatal("the holder did not notice the forced release")
		}
		if holder.Valid() {
			t.Fatal("the holder is still valid after its loss")
		}
		next := newProvider(t, repo, fastConfig(t, "next", 1, nil))
		if inst := acquire(t, next, 10*time.Second); inst != (nodeid.NodeInstance{ID: 0, Version: 4}) {
			t.Fatalf("the next taker got %v, want node 0 v4", inst)
		}
		if next.PreviousGracefullyShutdown() {
			t.Fatal("a forced release counted as graceful")
		}
	})
}

// ForceRelease of objects nobody holds: a released one keeps its version
// (an atLeast above it raises it), a never-held one stays at 0, an unusable
// one (scaled down) stays unusable.
func TestForceReleaseOfObjectsNobodyHolds(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		ctx := context.Background()
		repo := newRepo(t, srv, "")
		if err := nodeid.Initialize(ctx, repo, 3, "boot", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		cycle(t, repo, "a", 1) // node 0 released at v1
		forceReleasedAt(t, repo, 0, 0, 1, true, "released node 0")
		forceReleasedAt(t, repo, 0, 5, 5, true, "released node 0 with atLeast 5")

		forceReleasedAt(t, repo, 1, 0, 0, true, "never-held node 1")

		if err := nodeid.Scale(ctx, repo, 2, "admin", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		forceReleasedAt(t, repo, 2, 0, 0, false, "unusable node 2")
	})
}

// Without the object, the version comes from the peers' mappings or the
// operator; with neither, ForceRelease refuses (ErrVersionUnknown) rather
// than release at a guess. A corrupt object is treated the same and
// replaced.
func TestForceReleaseOfMissingAndCorruptObjects(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		ctx := context.Background()
		repo := newRepo(t, srv, "")
		key := nodeid.LeaseKey(testPrefix, 0)

		// Size 1: no peer can know node 0's version.
		cycle(t, repo, "a", 1)
		cycle(t, repo, "b", 1) // v2
		deleteRaw(t, srv, key)
		if _, err := nodeid.ForceRelease(ctx, repo, 0, 0, "operator"); !errors.Is(err, nodeid.ErrVersionUnknown) {
			t.Fatalf("missing object, nothing known: %v, want ErrVersionUnknown", err)
		}
		if _, err := repo.Get(ctx, 0); !errors.Is(err, nodeid.ErrNotFound) {
			t.Fatalf("a refused ForceRelease wrote the object: %v", err)
		}
		forceReleasedAt(t, repo, 0, 2, 2, true, "missing object, atLeast 2")

		putRaw(t, srv, key, "not a lease", map[string]string{"version": "x"})
		if _, err := nodeid.ForceRelease(ctx, repo, 0, 0, "operator"); !errors.Is(err, nodeid.ErrVersionUnknown) {
			t.Fatalf("corrupt object, nothing known: %v, want ErrVersionUnknown", err)
		}
		forceReleasedAt(t, repo, 0, 3, 3, true, "corrupt object, atLeast 3")
	})
}

// With a peer that records node 0's version in its mappings, a missing
// object is released at that version at least, not at the operator's lower
// one (the operator's version is still required: see
// TestForceReleaseOfAMissingOrCorruptObjectNeedsTheVersion).
func TestForceReleaseOfAMissingObjectUsesThePeersMappings(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		ctx := context.Background()
		repo := newRepo(t, srv, "")
		putLivePeer(t, srv, 2, nodeid.VersionMappings{0: 7})
		forceReleasedAt(t, repo, 0, 1, 7, true, "missing object, atLeast 1, a peer records v7")
		// The peer's lease is not touched.
		if rec, err := repo.Get(ctx, 1); err != nil || rec.Lease.TaskID != "peer" {
			t.Fatalf("the peer's lease after ForceRelease of node 0: %+v, %v", rec.Lease, err)
		}
	})
}

// ForceReleaseIfUnchanged writes only over the object the caller checked:
// a takeover (a new ETag) or a creation since it was seen missing makes it
// fail with ErrChanged and write nothing; the checked ETag releases.
func TestForceReleaseIfUnchangedRefusesAChangedObject(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		ctx := context.Background()
		repo := newRepo(t, srv, "")
		cycle(t, repo, "a", 1) // node 0 at v1, released
		seen, err := repo.Get(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		cycle(t, repo, "b", 1) // node 0 at v2: another ETag
		if _, err := nodeid.ForceReleaseIfUnchanged(ctx, repo, 0, 0, "operator", seen.ETag); !errors.Is(err, nodeid.ErrChanged) {
			t.Fatalf("ForceReleaseIfUnchanged with a stale ETag: %v, want ErrChanged", err)
		}
		if rec, _ := repo.Get(ctx, 0); rec.Lease.Forced {
			t.Fatalf("a stale ETag wrote: %+v", rec.Lease)
		}
		if _, err := nodeid.ForceReleaseIfUnchanged(ctx, repo, 0, 0, "operator", ""); !errors.Is(err, nodeid.ErrChanged) {
			t.Fatalf("ForceReleaseIfUnchanged of an object seen missing that exists: %v, want ErrChanged", err)
		}
		now, err := repo.Get(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		v, err := nodeid.ForceReleaseIfUnchanged(ctx, repo, 0, 0, "operator", now.ETag)
		if err != nil || v != 2 {
			t.Fatalf("ForceReleaseIfUnchanged with the current ETag: v%d, %v; want v2", v, err)
		}
		forced(t, repo, 0, 2, true)
	})
}

// ScaleIfUnchanged marks an object only if it still has the ETag the caller
// judged: node 1 taken after the check is not fenced (ErrChanged, nothing
// written over it); with fresh ETags the scale goes through.
func TestScaleIfUnchangedRefusesAnObjectChangedSinceTheCheck(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		ctx := context.Background()
		repo := newRepo(t, srv, "")
		if err := nodeid.Initialize(ctx, repo, 2, "boot", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		etags := func() map[int]string {
			m := map[int]string{}
			for id := 0; id < 2; id++ {
				rec, err := repo.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				m[id] = rec.ETag
			}
			return m
		}
		checked := etags()
		cycle(t, repo, "a", 2) // node 0 or 1 taken and released: a new ETag
		changed := -1
		for id, e := range etags() {
			if e != checked[id] {
				changed = id
			}
		}
		if changed != 1 {
			// cycle took node 0; change node 1 by hand.
			rec, err := repo.Get(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := nodeid.ForceRelease(ctx, repo, 1, rec.Lease.Instance.Version, "operator"); err != nil {
				t.Fatal(err)
			}
		}
		before, _ := repo.Get(ctx, 1)
		if err := nodeid.ScaleIfUnchanged(ctx, repo, 1, "admin", 2*time.Second, checked); !errors.Is(err, nodeid.ErrChanged) {
			t.Fatalf("ScaleIfUnchanged over a changed node 1: %v, want ErrChanged", err)
		}
		if after, _ := repo.Get(ctx, 1); after.ETag != before.ETag || !after.Lease.Acquirable {
			t.Fatalf("node 1 was written over: %+v", after.Lease)
		}
		if err := nodeid.ScaleIfUnchanged(ctx, repo, 1, "admin", 2*time.Second, etags()); err != nil {
			t.Fatalf("ScaleIfUnchanged with fresh ETags: %v", err)
		}
		if after, _ := repo.Get(ctx, 1); after.Lease.Acquirable {
			t.Fatalf("node 1 still acquirable after the scale to 1: %+v", after.Lease)
		}
	})
}

// Schedule: `release --force` while the holder is alive (the fault model:
// "release --force at any moment"). Two holders for up to a renewal
// interval are the operator's doing (the command says: only when the
// holder is known to be dead), but the successor must not also hard-link
// the live holder's files: a forced release is marked, and its successor
// copies.
func TestForceReleaseOfALiveHolderIsNotAGracefulTakeover(t *testing.T) {
	srv := s3test.NewFake(t)
	direct := newRepo(t, srv, "")
	holder := newProvider(t, direct, fastConfig(t, "holder", 1, newLossRecorder()))
	acquire(t, holder, 5*time.Second)

	if _, err := nodeid.ForceRelease(context.Background(), direct, 0, 0, "operator"); err != nil {
		t.Fatal(err)
	}
	rec, err := direct.Get(context.Background(), 0)
	if err != nil || !rec.Lease.Forced || rec.Lease.Held() {
		t.Fatalf("forced release reads back as %+v, %v", rec.Lease, err)
	}
	succ := newProvider(t, direct, fastConfig(t, "successor", 1, nil))
	inst := acquire(t, succ, 5*time.Second)
	if succ.PreviousGracefullyShutdown() {
		t.Fatalf("successor %v after release --force believes its predecessor stopped gracefully: it would hard-link the live holder's files", inst)
	}
	waitFor(t, 3*time.Second, "the old holder to fence itself", func() bool { return !holder.Valid() })
}
