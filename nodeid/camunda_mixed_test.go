package nodeid_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nodeid/nodeid/clock"
	"github.com/nodeid/nodeid/internal/camunda"
	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// Mixed operation: Camunda 8.9 brokers (internal/camunda follows its rules)
// and nodeid tasks on one bucket, as during a rolling migration. The
// conditions that make it safe are in docs/migration.md: nodeid's lease
// duration at least Camunda's, and wall clocks that agree within nodeid's
// safety margin.

// rootRepo is a repository on srv's bucket with no key prefix: Camunda's
// keys are at the bucket root.
func rootRepo(t testing.TB, srv *s3test.Server) *nodeid.S3Repository {
	t.Helper()
	return newS3Repo(t, srv, "", "", 2*time.Second)
}

// camundaBucket bootstraps srv's bucket for n node IDs as Camunda 8.9
// does and returns a client on it.
func camundaBucket(t testing.TB, srv *s3test.Server, n int) *s3.Client {
	t.Helper()
	client := srv.Client(t)
	if err := camunda.Bootstrap(context.Background(), client, srv.Bucket, n); err != nil {
		t.Fatal(err)
	}
	return client
}

// runBroker starts b's renewals; the returned stop ends them without a
// release (a crash) and reports whether any renewal failed before.
func runBroker(t *testing.T, b *camunda.Broker) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx, nil) }()
	t.Cleanup(cancel)
	return func() error { cancel(); return <-done }
}

func acquireBroker(t *testing.T, b *camunda.Broker, timeout time.Duration) (int, int64) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		id, v, err := b.Acquire(context.Background())
		if err == nil {
			return id, v
		}
		if !errors.Is(err, camunda.ErrNoLease) || time.Now().After(deadline) {
			t.Fatalf("camunda broker %s: %v", b.TaskID, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestMixedCamundaBrokersAndNodeidTasks(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		ctx := context.Background()
		client := camundaBucket(t, srv, 3)
		broker := func(task string) *camunda.Broker {
			return &camunda.Broker{Client: client, Bucket: srv.Bucket, TaskID: task, N: 3, LeaseDuration: 2 * time.Second}
		}
		c0, c1 := broker("camunda-0"), broker("camunda-1")
		if id, v := acquireBroker(t, c0, 5*time.Second); id != 0 || v != 1 {
			t.Fatalf("camunda-0 took node %d v%d", id, v)
		}
		if id, v := acquireBroker(t, c1, 5*time.Second); id != 1 || v != 1 {
			t.Fatalf("camunda-1 took node %d v%d", id, v)
		}
		stop0, stop1 := runBroker(t, c0), runBroker(t, c1)

		// A nodeid task takes the only free ID, Camunda's bootstrap object
		// (after a lease duration: an empty body proves nothing), and
		// never a live Camunda lease.
		n2 := newProvider(t, rootRepo(t, srv), fastConfig(t, "nodeid-a", 3, nil))
		if inst := acquire(t, n2, 15*time.Second); inst != (nodeid.NodeInstance{ID: 2, Version: 1}) {
			t.Fatalf("nodeid-a took %v, want node 2 v1", inst)
		}

		// Camunda-0 dies without releasing: a nodeid task takes node 0 at
		// v2, and camunda-0 (had it only paused) could renew no more.
		if err := stop0(); err != nil {
			t.Fatalf("camunda-0 lost its lease while nodeid-a acquired: %v", err)
		}
		n0 := newProvider(t, rootRepo(t, srv), fastConfig(t, "nodeid-b", 3, nil))
		if inst := acquire(t, n0, 15*time.Second); inst != (nodeid.NodeInstance{ID: 0, Version: 2}) {
			t.Fatalf("nodeid-b took %v, want node 0 v2", inst)
		}
		if err := c0.Renew(ctx); !errors.Is(err, camunda.ErrLost) {
			t.Fatalf("camunda-0 renewed over nodeid-b's lease: %v", err)
		}

		// Camunda-1 shuts down gracefully (an empty body): a nodeid task
		// takes node 1 at v2.
		if err := stop1(); err != nil {
			t.Fatalf("camunda-1 lost its lease: %v", err)
		}
		if err := c1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if s, _, err := camunda.Get(ctx, client, srv.Bucket, 1, 0); err != nil || s.Initialized || s.Version != 1 {
			t.Fatalf("camunda-1's release: %v, %v", s, err)
		}
		n1 := newProvider(t, rootRepo(t, srv), fastConfig(t, "nodeid-c", 3, nil))
		if inst := acquire(t, n1, 15*time.Second); inst != (nodeid.NodeInstance{ID: 1, Version: 2}) {
			t.Fatalf("nodeid-c took %v, want node 1 v2", inst)
		}

		// nodeid-a shuts down gracefully: a Camunda broker reads the
		// release as free and takes node 2 at once, at v2.
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := n2.Close(cctx); err != nil {
			t.Fatal(err)
		}
		c2 := broker("camunda-2")
		id, v, err := c2.Acquire(ctx)
		if err != nil || id != 2 || v != 2 {
			t.Fatalf("camunda-2 after nodeid-a's release: node %d v%d, %v", id, v, err)
		}
		if !n0.Valid() || !n1.Valid() {
			t.Fatal("a nodeid holder lost its lease")
		}
	})
}

// A Camunda broker with a longer lease renews less often than a nodeid
// task's lease duration. The nodeid task must not read the gap between two
// renewals as expiry: it waits at least the duration the Camunda lease
// claims (its timestamp less its Last-Modified).
func TestNodeidWaitsOutALongerCamundaLease(t *testing.T) {
	srv := s3test.NewFake(t)
	ctx := context.Background()
	client := camundaBucket(t, srv, 1)
	// Renews every 3 s; nodeid's L is 2 s.
	c := &camunda.Broker{Client: client, Bucket: srv.Bucket, TaskID: "camunda-slow", N: 1, LeaseDuration: 9 * time.Second}
	acquireBroker(t, c, 5*time.Second)
	lost := make(chan error, 1)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = c.Run(rctx, lost) }()

	p := newProvider(t, rootRepo(t, srv), fastConfig(t, "nodeid-short", 1, nil))
	actx, cancel := context.WithTimeout(ctx, 8*time.Second)
	defer cancel()
	if inst, err := p.Acquire(actx); err == nil {
		t.Fatalf("nodeid took %v from a live Camunda broker", inst)
	}
	select {
	case err := <-lost:
		t.Fatalf("the Camunda broker lost its lease: %v", err)
	default:
	}
}

// Camunda judges a nodeid lease by comparing its timestamp with its own wall
// clock. A nodeid holder writes its send time + L and stops at send + L - m,
// so a Camunda broker whose clock is ahead by less than m never takes a live
// nodeid lease.
func TestCamundaClockAheadByLessThanTheMarginNeverTakesANodeidLease(t *testing.T) {
	srv := s3test.NewFake(t)
	ctx := context.Background()
	client := camundaBucket(t, srv, 1)
	lost := newLossRecorder()
	cfg := doubled(fastConfig(t, "nodeid-holder", 1, lost)) // L 4 s, m 800 ms
	clk := clock.Real()
	cfg.Clock = clk // its deadline is compared with readings of clk
	p := newProvider(t, rootRepo(t, srv), cfg)
	acquire(t, p, 15*time.Second)
	skew := cfg.SafetyMargin - 100*time.Millisecond
	c := &camunda.Broker{Client: client, Bucket: srv.Bucket, TaskID: "camunda-ahead", N: 1, LeaseDuration: 2 * time.Second,
		Now: func() time.Time { return time.Now().Add(skew) }}
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		id, v, err := c.Acquire(ctx)
		if err != nil {
			continue
		}
		// A holder stalled past its deadline (a loaded machine) has
		// stopped, and then its lease may be taken. Taken while it was
		// still valid, after the whole Acquire, is two holders.
		taken := clk.Now()
		if deadline, _ := p.Deadline(); deadline.After(taken) {
			t.Fatalf("camunda broker with its clock %v ahead took node %d v%d from a live nodeid holder (valid %v longer)", skew, id, v, deadline.Sub(taken))
		}
		t.Logf("camunda broker took node %d v%d after the holder's deadline (it stalled: %v)", id, v, p.Err())
		break
	}
	if lost.count() != 0 {
		if err := p.Err(); !strings.Contains(err.Error(), "self-fence deadline") {
			t.Fatalf("the nodeid holder lost its lease other than by a stall: %v", err)
		}
		t.Logf("the holder self-fenced on a stalled machine: %v", p.Err())
	}
}

// The timestamp Camunda reads is the later of the provider's clock and the
// system's wall clock, plus L: a wall clock stepped forward after start (the
// provider's clock then lags) must not make the timestamp early.
func TestHeldTimestampIsTheLaterOfBothWallClocks(t *testing.T) {
	for _, step := range []time.Duration{time.Hour, -time.Hour} {
		srv := s3test.NewFake(t)
		cfg := fastConfig(t, "stamp", 1, nil)
		cfg.Wall = func() time.Time { return time.Now().Add(step) }
		p := newProvider(t, rootRepo(t, srv), cfg)
		before := time.Now()
		acquire(t, p, 15*time.Second)
		s, _, err := camunda.Get(context.Background(), srv.Client(t), srv.Bucket, 0, 0)
		if err != nil || !s.Initialized {
			t.Fatalf("%v, %v", s, err)
		}
		want := before.Add(max(step, 0) + cfg.LeaseDuration)
		if got := time.UnixMilli(s.Expiry); got.Before(want.Add(-time.Millisecond)) || got.After(want.Add(10*time.Second)) {
			t.Errorf("wall clock stepped %v: timestamp %v, want about %v", step, got, want)
		}
	}
}
