package main_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// longLeaseProvider is an in-process holder of a one-node cluster with a
// long lease, so the window between its renewals is wide.
func longLeaseProvider(t *testing.T, repo nodeid.Repository, task string) *nodeid.Provider {
	t.Helper()
	p, err := nodeid.NewProvider(repo, nodeid.Config{TaskID: task, ClusterSize: 1, LeaseDuration: 30 * time.Second,
		RenewInterval: 10 * time.Second, PollInterval: 200 * time.Millisecond, AcquireTimeout: 20 * time.Second,
		OnLost: func(error) {}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Review of 84b7b54: holder A holds node 0 at v4 (L = 30 s). Someone
// replaces its object with an empty body without metadata (what Camunda's
// bootstrap writes), which reads as a released lease at version 0. On
// 84b7b54 `release --force` without --yes judged nothing (no holder named)
// and released at v1; B took node 0 at once at v2 while A was still valid
// at v4: two holders, and a version that went down.
//
// An object at version 0 records neither the last holder's version nor
// whether a holder it was written over is still valid: release needs
// --version, and --yes while S3's clock says it was written within L + 1 s.
func TestReleaseForceOfAnObjectWithoutAVersionNeedsTheVersionAndJudgesItsAge(t *testing.T) {
	srv := s3test.NewFake(t)
	c := newCluster(t, srv, 1)
	ctx := context.Background()
	repo := c.repo()
	if err := nodeid.Initialize(ctx, repo, 1, "boot", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	for i := range 3 { // v1..v3, each released
		p := longLeaseProvider(t, repo, "old")
		if _, err := p.Acquire(ctx); err != nil {
			t.Fatal(i, err)
		}
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	a := longLeaseProvider(t, repo, "A")
	instA, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = a.HandOff(context.Background()) })
	replaceObject(t, srv, nodeid.LeaseKey("e2e/", 0), nil, nil)

	code, out := c.release(t, "0")
	if code != 2 || !strings.Contains(out, "--version") {
		t.Errorf("release --force of an object at version 0 without --version: exit %d, want 2 naming --version:\n%s", code, out)
	}
	code, out = c.release(t, "0", "--version", "1")
	if code != 2 || !strings.Contains(out, "--yes") {
		t.Errorf("release --force of an empty object written just now, without --yes: exit %d, want 2 naming --yes (the holder it was written over may be valid):\n%s", code, out)
	}
	if code == 0 {
		b := longLeaseProvider(t, repo, "B")
		instB, err := b.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = b.HandOff(context.Background()) })
		if a.Valid() && b.Valid() {
			t.Errorf("two valid holders of node 0 at once: A %v and B %v", instA, instB)
		}
	}
	rec, err := repo.Get(ctx, 0)
	if err != nil || !rec.Lease.Legacy {
		t.Errorf("the refused releases wrote over the empty object: %+v %v", rec.Lease, err)
	}
}
