package camunda

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nodeid/nodeid/internal/s3test"
)

func TestMain(m *testing.M) { s3test.VersityMain(m) }

// eachServer runs f against a fresh bucket on gofakes3 and on VersityGW.
func eachServer(t *testing.T, f func(t *testing.T, c *s3.Client, bucket string)) {
	t.Helper()
	for _, kind := range []string{s3test.KindFake, s3test.KindVersity} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var s *s3test.Server
			if kind == s3test.KindFake {
				s = s3test.NewFake(t)
			} else {
				s = s3test.StartVersity(t)
			}
			f(t, s.Client(t), s.Bucket)
		})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// clock is a settable wall clock, safe for concurrent use.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.UnixMilli(1_700_000_000_000)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func get(t *testing.T, c *s3.Client, bucket string, id int) Stored {
	t.Helper()
	s, _, err := Get(ctx(t), c, bucket, id, 0)
	if err != nil {
		t.Fatalf("Get(%d): %v", id, err)
	}
	return s
}

// raw returns the body and metadata of key.
func raw(t *testing.T, c *s3.Client, bucket, key string) ([]byte, map[string]string) {
	t.Helper()
	b, out := s3test.GetObject(ctx(t), t, c, bucket, key)
	return b, out.Metadata
}

const L = 6 * time.Second

func broker(c *s3.Client, bucket, task string, n int, clk *clock) *Broker {
	return &Broker{Client: c, Bucket: bucket, TaskID: task, N: n, LeaseDuration: L, Now: clk.Now, RequestTimeout: 5 * time.Second}
}

func TestBootstrap(t *testing.T) {
	eachServer(t, func(t *testing.T, c *s3.Client, bucket string) {
		if err := Bootstrap(ctx(t), c, bucket, 3); err != nil {
			t.Fatal(err)
		}
		for id := range 3 {
			body, meta := raw(t, c, bucket, Key(id))
			if len(body) != 0 || len(meta) != 0 {
				t.Errorf("%s: body %q meta %v, want empty and none", Key(id), body, meta)
			}
			if s := get(t, c, bucket, id); s.String() != "Uninitialized v0 acquirable=true" {
				t.Errorf("%s reads as %v", Key(id), s)
			}
		}
		raw(t, c, bucket, InitializedMarkerKey)
		if _, err := c.HeadObject(ctx(t), &s3.HeadObjectInput{Bucket: &bucket, Key: aws.String(Key(3))}); err == nil {
			t.Error("3.json exists after a bootstrap of 3")
		}

		// A bootstrap racing a broker (marker not yet written) must not
		// overwrite a lease: If-None-Match.
		if _, err := WriteHeld(ctx(t), c, bucket, 1, "other", 4, time.Now().Add(time.Hour), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := c.DeleteObject(ctx(t), &s3.DeleteObjectInput{Bucket: &bucket, Key: aws.String(InitializedMarkerKey)}); err != nil {
			t.Fatal(err)
		}
		if err := Bootstrap(ctx(t), c, bucket, 3); err != nil {
			t.Fatal(err)
		}
		if s := get(t, c, bucket, 1); !s.Initialized || s.TaskID != "other" || s.Version != 4 {
			t.Errorf("1.json after a second bootstrap: %v", s)
		}
	})
}

func TestAcquireRenewRelease(t *testing.T) {
	eachServer(t, func(t *testing.T, c *s3.Client, bucket string) {
		clk := newClock()
		if err := Bootstrap(ctx(t), c, bucket, 2); err != nil {
			t.Fatal(err)
		}
		a, b := broker(c, bucket, "task-a", 2, clk), broker(c, bucket, "task-b", 2, clk)
		if id, v, err := a.Acquire(ctx(t)); err != nil || id != 0 || v != 1 {
			t.Fatalf("a.Acquire = %d, %d, %v; want 0, 1", id, v, err)
		}
		if id, v, err := b.Acquire(ctx(t)); err != nil || id != 1 || v != 1 {
			t.Fatalf("b.Acquire = %d, %d, %v; want 1, 1", id, v, err)
		}
		s := get(t, c, bucket, 0)
		want := Stored{Initialized: true, Version: 1, Acquirable: true, TaskID: "task-a", NodeID: 0, Expiry: clk.Now().Add(L).UnixMilli(), Known: map[int32]*int64{0: new(int64(1))}}
		if s.String() != want.String() {
			t.Errorf("0.json = %v, want %v", s, want)
		}
		// What the writer laid down is what Jackson reads.
		body, meta := raw(t, c, bucket, Key(0))
		if got := JacksonCheck(t, LeaseObject(body, meta))[0]; got != want.String() {
			t.Errorf("Jackson reads 0.json as %q, want %q", got, want)
		}

		clk.Add(L / 3)
		_, _, before, _ := a.Held()
		if err := a.Renew(ctx(t)); err != nil {
			t.Fatal(err)
		}
		_, _, after, _ := a.Held()
		if s := get(t, c, bucket, 0); s.Expiry != clk.Now().Add(L).UnixMilli() || s.Version != 1 || len(s.Known) != 0 || s.Known == nil || after == before {
			t.Errorf("after renew: %v, etag %s -> %s", s, before, after)
		}

		if err := a.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
		if s := get(t, c, bucket, 0); s.String() != "Uninitialized v1 acquirable=true" {
			t.Errorf("after release 0.json = %v", s)
		}
		body, meta = raw(t, c, bucket, Key(0))
		if got := JacksonCheck(t, LeaseObject(body, meta))[0]; got != "Uninitialized v1 acquirable=true" {
			t.Errorf("Jackson reads released 0.json as %q", got)
		}
		a2 := broker(c, bucket, "task-a2", 2, clk)
		if id, v, err := a2.Acquire(ctx(t)); err != nil || id != 0 || v != 2 {
			t.Fatalf("a2.Acquire = %d, %d, %v; want 0, 2", id, v, err)
		}
	})
}

func TestValidLeaseIsNotTaken(t *testing.T) {
	eachServer(t, func(t *testing.T, c *s3.Client, bucket string) {
		clkA, clkB := newClock(), newClock()
		if err := Bootstrap(ctx(t), c, bucket, 1); err != nil {
			t.Fatal(err)
		}
		a, b := broker(c, bucket, "task-a", 1, clkA), broker(c, bucket, "task-b", 1, clkB)
		if _, _, err := a.Acquire(ctx(t)); err != nil {
			t.Fatal(err)
		}
		// Exactly at the expiry the lease is still valid (now <= timestamp).
		clkB.Add(L)
		if _, _, err := b.Acquire(ctx(t)); !errors.Is(err, ErrNoLease) {
			t.Fatalf("b.Acquire of a valid lease: %v, want ErrNoLease", err)
		}
		// One millisecond later by b's clock (a skew: a's clock has not
		// moved) b takes it with version+1.
		clkB.Add(time.Millisecond)
		if id, v, err := b.Acquire(ctx(t)); err != nil || id != 0 || v != 2 {
			t.Fatalf("b.Acquire of an expired lease = %d, %d, %v; want 0, 2", id, v, err)
		}
		if s := get(t, c, bucket, 0); s.TaskID != "task-b" || s.Version != 2 {
			t.Errorf("0.json = %v", s)
		}
		// a's renewal now fails the If-Match: a has lost its lease.
		err := a.Renew(ctx(t))
		if !errors.Is(err, ErrLost) {
			t.Fatalf("a.Renew after b's write: %v, want ErrLost", err)
		}
		if _, _, _, ok := a.Held(); ok {
			t.Error("a still holds a lease after a failed renewal")
		}
		if s := get(t, c, bucket, 0); s.TaskID != "task-b" {
			t.Errorf("a's failed renewal changed 0.json: %v", s)
		}
	})
}

func TestRunReportsLoss(t *testing.T) {
	eachServer(t, func(t *testing.T, c *s3.Client, bucket string) {
		if err := Bootstrap(ctx(t), c, bucket, 1); err != nil {
			t.Fatal(err)
		}
		a := &Broker{Client: c, Bucket: bucket, TaskID: "task-a", N: 1, LeaseDuration: 600 * time.Millisecond, RequestTimeout: 5 * time.Second}
		if _, _, err := a.Acquire(ctx(t)); err != nil {
			t.Fatal(err)
		}
		lost := make(chan error, 1)
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx(t), lost) }()

		// Renewals keep the lease alive past its first expiry.
		first := get(t, c, bucket, 0).Expiry
		time.Sleep(time.Second)
		select {
		case err := <-lost:
			t.Fatalf("lost before anyone else wrote: %v", err)
		default:
		}
		if s := get(t, c, bucket, 0); s.TaskID != "task-a" || s.Expiry <= first {
			t.Fatalf("lease not renewed: %v (first expiry %d)", s, first)
		}

		if _, err := WriteHeld(ctx(t), c, bucket, 0, "intruder", 2, time.Now().Add(time.Hour), nil); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-lost:
			if !errors.Is(err, ErrLost) {
				t.Errorf("loss reported as %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no loss reported 5 s after someone else wrote the lease")
		}
		if err := <-done; !errors.Is(err, ErrLost) {
			t.Errorf("Run returned %v", err)
		}
		if s := get(t, c, bucket, 0); s.TaskID != "intruder" {
			t.Errorf("0.json = %v", s)
		}
	})
}

func TestAcquireSkipsScaledDownAndFailsOnUnreadable(t *testing.T) {
	eachServer(t, func(t *testing.T, c *s3.Client, bucket string) {
		clk := newClock()
		if err := Bootstrap(ctx(t), c, bucket, 2); err != nil {
			t.Fatal(err)
		}
		if _, err := WriteReleased(ctx(t), c, bucket, 0, 3, false); err != nil {
			t.Fatal(err)
		}
		if id, v, err := broker(c, bucket, "a", 2, clk).Acquire(ctx(t)); err != nil || id != 1 || v != 1 {
			t.Fatalf("Acquire = %d, %d, %v; want 1, 1 (0 is scaled down)", id, v, err)
		}
		// A body with a field Camunda does not know makes the object
		// unreadable, and Camunda's acquire fails rather than skipping it.
		body := []byte(`{"taskId":"x","timestamp":0,"nodeInstance":{"id":1,"version":1},"knownVersionMappings":{},"extra":1}`)
		if _, err := c.PutObject(ctx(t), &s3.PutObjectInput{Bucket: &bucket, Key: aws.String(Key(1)), Body: bytes.NewReader(body), Metadata: heldMeta("x", 1)}); err != nil {
			t.Fatal(err)
		}
		if _, err := WriteReleased(ctx(t), c, bucket, 0, 3, true); err != nil {
			t.Fatal(err)
		}
		// 0 is acquirable again and comes first, so it is taken...
		if id, _, err := broker(c, bucket, "b", 2, clk).Acquire(ctx(t)); err != nil || id != 0 {
			t.Fatalf("Acquire = %d, %v; want 0", id, err)
		}
		// ...and the next broker reaches the unreadable 1.json.
		if _, _, err := broker(c, bucket, "c", 2, clk).Acquire(ctx(t)); !errors.Is(err, ErrUnreadable) {
			t.Fatalf("Acquire over an unreadable lease: %v, want ErrUnreadable", err)
		}
	})
}
