package main_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/camunda"
	"github.com/nodeid/nodeid/internal/s3test"
)

// Issue 26.13: Camunda ignores forced=true and takes any uninitialized
// object as a graceful release, hard-linking every file of a holder that
// may still write. While the lease set holds leases in Camunda's format
// (a Camunda bootstrap, release or held lease), release --force refuses
// (exit 2, nothing written) unless --camunda-graceful-ok; --dry-run says
// so. With the flag the release goes ahead, and Camunda indeed reads it
// as uninitialized (graceful).
func TestReleaseForceRefusedWhileTheBucketHoldsCamundaLeases(t *testing.T) {
	forBothServers(t, func(t *testing.T, srv *s3test.Server) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		client := srv.Client(t)
		c := newCluster(t, srv, 3)
		c.env = append(c.env, "NODEID_PREFIX=") // Camunda's leases are at the bucket root
		if err := camunda.Bootstrap(ctx, client, srv.Bucket, 3); err != nil {
			t.Fatal(err)
		}
		if _, err := camunda.WriteReleased(ctx, client, srv.Bucket, 0, 2, true); err != nil {
			t.Fatal(err)
		}
		if _, err := camunda.WriteHeld(ctx, client, srv.Bucket, 1, "camunda-dead-task", 4, time.Now().Add(-10*time.Minute), map[int32]int64{0: 2, 1: 4}); err != nil {
			t.Fatal(err)
		}
		_, before, err := camunda.Get(ctx, client, srv.Bucket, 1, 0)
		if err != nil {
			t.Fatal(err)
		}

		code, out := c.release(t, "1", "--yes")
		if code != 2 || !strings.Contains(out, "leases in Camunda's format (node IDs [0 1 2])") || !strings.Contains(out, "--camunda-graceful-ok") ||
			strings.Count(strings.TrimSpace(out), "\n") > 0 {
			t.Errorf("release --force on a bucket with Camunda's leases: exit %d, want 2 and one line naming --camunda-graceful-ok:\n%s", code, out)
		}
		if _, etag, err := camunda.Get(ctx, client, srv.Bucket, 1, 0); err != nil || etag != before {
			t.Fatalf("a refused release wrote node 1 (ETag %s, was %s, %v)", etag, before, err)
		}
		if code, out := c.release(t, "1", "--yes", "--dry-run"); code != 0 || !strings.Contains(out, "needs --camunda-graceful-ok") {
			t.Errorf("dry run: exit %d, want 0 and the need for --camunda-graceful-ok:\n%s", code, out)
		}

		if code, out := c.release(t, "1", "--yes", "--camunda-graceful-ok"); code != 0 || !strings.Contains(out, "node 1 released at version 4") {
			t.Fatalf("release --force --camunda-graceful-ok: exit %d, want 0:\n%s", code, out)
		}
		s, _, err := camunda.Get(ctx, client, srv.Bucket, 1, 0)
		if err != nil || s.Initialized || s.Version != 4 || !s.Acquirable {
			t.Errorf("Camunda reads the forced release as %v (%v), want uninitialized (graceful to Camunda) at v4", s, err)
		}
	})
}
