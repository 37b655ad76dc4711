package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nodeid/nodeid/internal/faultproxy"
	"github.com/nodeid/nodeid/nodeid"
)

// netProfile is the network between the storm's tasks and S3.
type netProfile struct {
	Name            string
	Latency, Jitter time.Duration // added to every request by a faultproxy
}

var (
	loopback = netProfile{Name: "loopback"}
	// awsLike puts a round trip of an S3 request within a region in front
	// of every request: 20-40 ms more, as for small objects on AWS S3.
	awsLike = netProfile{Name: "aws-like", Latency: 20 * time.Millisecond, Jitter: 20 * time.Millisecond}
)

// stormResult is one acquisition storm: N tasks start at once for N IDs.
type stormResult struct {
	Took      time.Duration            // until the last task holds its ID
	ServerCPU float64                  // the gateway's CPU seconds meanwhile
	Total     int64                    // S3 requests of all tasks until then
	PerTask   []float64                // S3 requests of each task until it held its ID
	Attempts  int64                    // conditional PUTs sent to take an ID
	Ops       map[string]int           // requests by operation (LIST, GET, PUT)
	OpTime    map[string]time.Duration // their summed latency
	OpWorst   map[string]time.Duration // the slowest of each
	Waited    int                      // tasks that waited a poll interval
}

// runStorm starts n in-process providers with the given strategy at once on
// a fresh bucket (bootstrapped first unless cold) and waits until every one
// holds an ID. Each task has its own S3 client (its own connection pool, as
// separate ECS tasks would) and its own repository, whose counter gives its
// requests, retries included. On a network with latency every task talks to
// S3 through one faultproxy that delays each request.
func runStorm(ctx context.Context, g *gateway, strategy nodeid.AcquireStrategy, n int, cold bool, net netProfile, timeout time.Duration) (stormResult, error) {
	phase := "boot"
	if cold {
		phase = "cold"
	}
	bucket, err := g.newBucket(ctx, fmt.Sprintf("storm-%s-%s-n%d", strategy, phase, n))
	if err != nil {
		return stormResult{}, err
	}
	if !cold {
		repo, err := nodeid.NewS3Repository(g.client, bucket, "", 0)
		if err != nil {
			return stormResult{}, err
		}
		if err := nodeid.Initialize(ctx, repo, n, "bench-bootstrap", nodeid.DefaultLeaseDuration); err != nil {
			return stormResult{}, fmt.Errorf("bootstrap: %w", err)
		}
	}

	endpoint := g.URL
	if net.Latency > 0 || net.Jitter > 0 {
		fp, err := faultproxy.Start(g.URL)
		if err != nil {
			return stormResult{}, err
		}
		defer fp.Close()
		fp.Set(faultproxy.Fault{Latency: net.Latency, Jitter: net.Jitter})
		endpoint = fp.URL
	}

	// Task IDs are random, like ECS task ARNs, so the spread strategy's
	// start offsets (a hash of the task ID) differ between repetitions.
	run := make([]byte, 4)
	rand.Read(run)
	msgs := &msgCounter{n: map[string]int{}}
	quiet := slog.New(msgs)
	var lostMu sync.Mutex
	var lost []error
	type task struct {
		repo *nodeid.S3Repository
		p    *nodeid.Provider
		ops  *opStats
	}
	tasks := make([]task, n)
	for i := range tasks {
		ops := newOpStats()
		var client *s3.Client
		if client, err = g.newClient(ctx, endpoint); err != nil {
			return stormResult{}, err
		}
		// Counted per task and read when its Acquire returns, so renewals
		// of early finishers during a long storm are not counted.
		client = withOpStats(client, ops)
		repo, err := nodeid.NewS3Repository(client, bucket, "", 0)
		if err != nil {
			return stormResult{}, err
		}
		p, err := nodeid.NewProvider(repo, nodeid.Config{
			TaskID:         fmt.Sprintf("bench-%s-task-%03d", hex.EncodeToString(run), i),
			ClusterSize:    n,
			Strategy:       strategy,
			AcquireTimeout: timeout,
			Logger:         quiet,
			// The default exits the process; a benchmark records it.
			OnLost: func(err error) { lostMu.Lock(); lost = append(lost, err); lostMu.Unlock() },
		})
		if err != nil {
			return stormResult{}, err
		}
		tasks[i] = task{repo, p, ops}
	}
	defer func() {
		var wg sync.WaitGroup
		for _, t := range tasks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				t.p.Close(cctx)
			}()
		}
		wg.Wait()
	}()

	start := make(chan struct{})
	res := stormResult{PerTask: make([]float64, n), Ops: map[string]int{}, OpTime: map[string]time.Duration{}, OpWorst: map[string]time.Duration{}}
	opsAt := make([]map[string]int, n)
	opTimeAt := make([]map[string]time.Duration, n)
	opWorstAt := make([]map[string]time.Duration, n)
	ids := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, t := range tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			inst, err := t.p.Acquire(ctx)
			res.PerTask[i] = float64(t.repo.Requests())
			opsAt[i], opTimeAt[i], opWorstAt[i] = t.ops.snapshot()
			ids[i], errs[i] = inst.ID, err
		}()
	}
	cpu0, cpuErr := cpuSeconds(g.PID())
	t0 := time.Now()
	close(start)
	wg.Wait()
	res.Took = time.Since(t0)
	cpu1, err := cpuSeconds(g.PID())
	if err := errors.Join(cpuErr, err); err != nil {
		return res, fmt.Errorf("gateway CPU: %w", err)
	}
	res.ServerCPU = cpu1 - cpu0
	for i := range tasks {
		for k, v := range opsAt[i] {
			res.Ops[k] += v
			res.OpTime[k] += opTimeAt[i][k]
			res.OpWorst[k] = max(res.OpWorst[k], opWorstAt[i][k])
		}
	}

	seen := map[int]int{}
	for i := range tasks {
		if errs[i] != nil {
			return res, fmt.Errorf("task %d: %w", i, errs[i])
		}
		if j, dup := seen[ids[i]]; dup {
			return res, fmt.Errorf("tasks %d and %d both hold node %d", j, i, ids[i])
		}
		seen[ids[i]] = i
		res.Total += int64(res.PerTask[i])
		res.Attempts += tasks[i].p.Stats().AcquireAttempts
	}
	res.Waited = msgs.count("no node id free, waiting")
	lostMu.Lock()
	defer lostMu.Unlock()
	if len(lost) > 0 {
		return res, fmt.Errorf("%d leases lost during the storm, first: %v", len(lost), lost[0])
	}
	return res, nil
}

// msgCounter is a slog.Handler that counts records by message and prints
// nothing: the storm reports how many tasks had to wait a poll interval
// ("no node id free, waiting") although an ID was free for each of them.
type msgCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *msgCounter) Enabled(context.Context, slog.Level) bool { return true }

func (c *msgCounter) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	c.n[r.Message]++
	c.mu.Unlock()
	return nil
}

func (c *msgCounter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *msgCounter) WithGroup(string) slog.Handler      { return c }

func (c *msgCounter) count(msg string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[msg]
}

// opCost is the gateway's CPU time per request of each kind, measured one
// request at a time on a bootstrapped bucket of n lease objects.
type opCost struct {
	N    int                // lease objects in the bucket (a LIST returns them all)
	Reps int                // requests of each kind
	CPU  map[string]float64 // milliseconds per request, by kind
}

// opCostKinds are the requests a storm sends, in the order reported.
var opCostKinds = []string{"LIST", "GET", "PUT If-Match", "PUT If-None-Match (412)"}

// measureOpCost explains the loopback storm times: there the gateway's CPU,
// not the network, is the bottleneck, and a LIST costs it several GETs.
func measureOpCost(ctx context.Context, g *gateway, n int) (opCost, error) {
	const reps = 300
	bucket, err := g.newBucket(ctx, fmt.Sprintf("opcost-n%d", n))
	if err != nil {
		return opCost{}, err
	}
	repo, err := nodeid.NewS3Repository(g.client, bucket, "", 0)
	if err != nil {
		return opCost{}, err
	}
	if err := nodeid.Initialize(ctx, repo, n, "bench-opcost", nodeid.DefaultLeaseDuration); err != nil {
		return opCost{}, err
	}
	rec, err := repo.Get(ctx, 0)
	if err != nil {
		return opCost{}, err
	}
	etag := rec.ETag
	l := nodeid.Lease{Instance: nodeid.NodeInstance{ID: 0}, Nonce: "bench-opcost", Acquirable: true}
	ops := map[string]func(i int) error{
		"LIST": func(int) error { _, err := repo.List(ctx); return err },
		"GET":  func(i int) error { _, err := repo.Get(ctx, i%n); return err },
		"PUT If-Match": func(int) error {
			// A write that lands, like a take or a renewal: one object
			// rewritten over and over, with the ETag of the last write.
			l.Instance.ID = 0
			l.Nonce = fmt.Sprintf("bench-opcost-%d", time.Now().UnixNano())
			var err error
			etag, err = repo.Write(ctx, l, etag)
			return err
		},
		"PUT If-None-Match (412)": func(i int) error {
			// A create of an object that exists, as in a cold storm.
			l.Instance.ID = i % n
			_, err := repo.Create(ctx, l)
			return expect412(err)
		},
	}
	c := opCost{N: n, Reps: reps, CPU: map[string]float64{}}
	for _, kind := range opCostKinds {
		cpu0, err := cpuSeconds(g.PID())
		if err != nil {
			return c, err
		}
		for i := range reps {
			if err := ops[kind](i); err != nil {
				return c, fmt.Errorf("%s: %w", kind, err)
			}
		}
		cpu1, err := cpuSeconds(g.PID())
		if err != nil {
			return c, err
		}
		c.CPU[kind] = (cpu1 - cpu0) * 1000 / reps
	}
	return c, nil
}

func expect412(err error) error {
	if errors.Is(err, nodeid.ErrPreconditionFailed) {
		return nil
	}
	return fmt.Errorf("want 412, got %v", err)
}
