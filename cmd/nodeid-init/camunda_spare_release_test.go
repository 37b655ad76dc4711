package main_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/camunda"
	"github.com/nodeid/nodeid/internal/s3test"
)

// Review r26: the Camunda guard of release --force looks only for lease
// objects in Camunda's format. A Camunda broker that waits for an ID (a
// spare) writes nothing, and once nodeid tasks hold every ID no object is
// in Camunda's format, although Camunda's own marker (node-ids-initialized)
// says Camunda brokers use the bucket. The forced release goes through
// without --camunda-graceful-ok, and the waiting Camunda broker takes the
// ID as a graceful release (it hard-links the last holder's files).
func TestReleaseForceDoesNotHandAWaitingCamundaBrokerAGracefulRelease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := s3test.NewFake(t)
	client := srv.Client(t)
	c := newCluster(t, srv, 1)
	c.env = append(c.env, "NODEID_PREFIX=") // Camunda's leases are at the bucket root
	if err := camunda.Bootstrap(ctx, client, srv.Bucket, 1); err != nil {
		t.Fatal(err)
	}
	holder := c.runTask("holder")
	holder.identity(t, 30*time.Second)
	// The holder dies; its lease object (nodeid's format) is not expired.
	_ = holder.cmd.Process.Signal(syscall.SIGKILL)
	<-holder.done

	spare := &camunda.Broker{Client: client, Bucket: srv.Bucket, TaskID: "camunda-spare", N: 1, LeaseDuration: 15 * time.Second}
	if _, _, err := spare.Acquire(ctx); !errors.Is(err, camunda.ErrNoLease) {
		t.Fatalf("the Camunda broker should be waiting (node 0 held by nodeid): %v", err)
	}

	code, out := c.release(t, "0", "--yes")
	s, _, err := camunda.Get(ctx, client, srv.Bucket, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if code == 0 && !s.Initialized {
		_, v, aerr := spare.Acquire(ctx)
		t.Errorf("release --force without --camunda-graceful-ok on a bucket Camunda uses (its marker %s is there, a Camunda broker waits): exit 0, and Camunda reads node 0 as %v, a graceful release; the waiting broker then took it (v%d, %v):\n%s",
			camunda.InitializedMarkerKey, s, v, aerr, strings.TrimSpace(out))
	}
}
