package main

import (
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nodeid/nodeid/nodeid"
)

// memBucket is an in-memory S3 bucket with S3's conditional writes, ETags
// (the MD5 of the body), Last-Modified and Date in whole seconds and
// listings of 1,000 keys a page, for the scale scenario at N = 1,000: on
// this machine a thousand providers over HTTP and gofakes3 starve each
// other's renewals. Requests are counted as S3 would bill them (a LIST per
// page). It implements nodeid.TenureRepository and
// nodeid.ReleaseHintRepository like S3Repository.
type memBucket struct {
	// Readers share mu; a waiting writer (a renewal) goes first, as no
	// lock of S3's would hold it back behind a thousand listings.
	mu      sync.RWMutex
	objects map[string]memObject
	sorted  []string // the keys in order; nil after a key was added or removed

	countMu sync.Mutex
	counts  map[string]int
}

type memObject struct {
	body []byte
	meta map[string]string
	etag string
	lm   time.Time
}

var (
	_ nodeid.TenureRepository      = (*memBucket)(nil)
	_ nodeid.ReleaseHintRepository = (*memBucket)(nil)
)

func newMemBucket() *memBucket {
	return &memBucket{objects: map[string]memObject{}, counts: map[string]int{}}
}

func (b *memBucket) snapshot() map[string]int {
	b.countMu.Lock()
	defer b.countMu.Unlock()
	return maps.Clone(b.counts)
}

func (b *memBucket) count(kind string, n int) {
	b.countMu.Lock()
	b.counts[kind] += n
	b.countMu.Unlock()
}

func memErr(op, key string, kind error, status int) error {
	return &nodeid.StorageError{Op: op, Key: key, Status: status, Kind: kind}
}

func (b *memBucket) now() time.Time { return time.Now().UTC().Truncate(time.Second) }

// put stores body under key if ifMatch matches (or, create, if absent).
func (b *memBucket) put(op, key string, body []byte, meta map[string]string, ifMatch string, create bool) (string, error) {
	b.count("PUT", 1)
	b.mu.Lock()
	defer b.mu.Unlock()
	o, exists := b.objects[key]
	switch {
	case create && exists:
		return "", memErr(op, key, nodeid.ErrPreconditionFailed, 412)
	case !create && !exists:
		return "", memErr(op, key, nodeid.ErrNotFound, 404)
	case !create && o.etag != ifMatch:
		return "", memErr(op, key, nodeid.ErrPreconditionFailed, 412)
	}
	etag := fmt.Sprintf(`"%x"`, md5.Sum(body))
	if !exists {
		b.sorted = nil
	}
	b.objects[key] = memObject{body: body, meta: meta, etag: etag, lm: b.now()}
	return etag, nil
}

func (b *memBucket) List(context.Context) (nodeid.Listing, error) {
	b.mu.RLock()
	keys := b.sorted
	b.mu.RUnlock()
	if keys == nil {
		b.mu.Lock()
		if b.sorted == nil {
			for k := range b.objects {
				b.sorted = append(b.sorted, k)
			}
			sort.Strings(b.sorted)
		}
		b.mu.Unlock()
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	keys = b.sorted
	b.count("LIST", max(1, (len(keys)+999)/1000))
	l := nodeid.Listing{ServerDate: b.now(), TenuresListed: true}
	for _, k := range keys {
		o, ok := b.objects[k]
		if !ok {
			continue
		}
		if k == nodeid.MarkerKey("") {
			l.MarkerSeen = true
			continue
		}
		if t, ok := nodeid.ParseTenureKey("", k); ok {
			t.LastModified = o.lm
			l.Tenures = append(l.Tenures, t)
			continue
		}
		if id, ok := nodeid.ParseLeaseKey("", k); ok {
			l.Slots = append(l.Slots, nodeid.Slot{ID: id, ETag: o.etag, LastModified: o.lm, Size: int64(len(o.body))})
		}
	}
	sort.Slice(l.Slots, func(i, j int) bool { return l.Slots[i].ID < l.Slots[j].ID })
	return l, nil
}

func (b *memBucket) Get(_ context.Context, id int) (nodeid.Record, error) {
	key := nodeid.LeaseKey("", id)
	b.count("GET", 1)
	b.mu.RLock()
	o, ok := b.objects[key]
	b.mu.RUnlock()
	if !ok {
		return nodeid.Record{}, memErr("get", key, nodeid.ErrNotFound, 404)
	}
	rec := nodeid.Record{Slot: nodeid.Slot{ID: id, ETag: o.etag, LastModified: o.lm, Size: int64(len(o.body))}, ServerDate: b.now()}
	var err error
	rec.Lease, err = nodeid.DecodeLease(id, o.body, o.meta)
	return rec, err
}

func (b *memBucket) Create(_ context.Context, l nodeid.Lease) (string, error) {
	body, meta := l.Encode()
	return b.put("create", nodeid.LeaseKey("", l.Instance.ID), body, meta, "", true)
}

func (b *memBucket) Write(_ context.Context, l nodeid.Lease, etag string) (string, error) {
	body, meta := l.Encode()
	return b.put("write", nodeid.LeaseKey("", l.Instance.ID), body, meta, etag, false)
}

func (b *memBucket) Marker(context.Context) (nodeid.ClusterMarker, error) {
	key := nodeid.MarkerKey("")
	b.count("GET", 1)
	b.mu.RLock()
	o, ok := b.objects[key]
	b.mu.RUnlock()
	if !ok {
		return nodeid.ClusterMarker{}, memErr("get", key, nodeid.ErrNotFound, 404)
	}
	m, err := nodeid.DecodeMarker(o.body)
	m.LastModified = o.lm
	return m, err
}

func (b *memBucket) CreateMarker(_ context.Context, m nodeid.ClusterMarker) error {
	_, err := b.put("create", nodeid.MarkerKey(""), m.Encode(), nil, "", true)
	return err
}

func (b *memBucket) ListTenures(ctx context.Context) ([]nodeid.TenureObject, error) {
	l, err := b.List(ctx)
	return l.Tenures, err
}

func (b *memBucket) CreateTenure(_ context.Context, t nodeid.TenureObject) error {
	key, ok := nodeid.TenureKey("", t)
	if !ok {
		return errors.New("tenure cannot be named")
	}
	_, err := b.put("create tenure", key, []byte(key), nil, "", true)
	return err
}

func (b *memBucket) DeleteTenure(_ context.Context, t nodeid.TenureObject) error {
	key, _ := nodeid.TenureKey("", t)
	b.count("DELETE", 1)
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.objects[key]; ok && strings.HasPrefix(key, nodeid.TenureKeyPrefix) {
		delete(b.objects, key)
		b.sorted = nil
	}
	return nil
}

func (b *memBucket) ReleaseHint(context.Context) (string, error) {
	b.count("HEAD", 1)
	b.mu.RLock()
	defer b.mu.RUnlock()
	o, ok := b.objects[nodeid.ReleaseHintKey]
	if !ok {
		return "", memErr("head", nodeid.ReleaseHintKey, nodeid.ErrNotFound, 404)
	}
	return o.etag, nil
}

func (b *memBucket) SignalRelease(ctx context.Context) error {
	etag, err := b.ReleaseHint(ctx)
	if err != nil && !errors.Is(err, nodeid.ErrNotFound) {
		return err
	}
	_, err = b.put("release hint", nodeid.ReleaseHintKey, []byte(time.Now().String()), nil, etag, etag == "")
	if err != nil && !errors.Is(err, nodeid.ErrPreconditionFailed) && !errors.Is(err, nodeid.ErrNotFound) {
		return err
	}
	return nil
}

// inMemory is the storm's network for sizes too large for VersityGW and
// the tasks on this machine: no HTTP at all (memBucket).
var inMemory = netProfile{Name: "in-memory"}

// countedBucket is one task's view of a shared memBucket, counting that
// task's requests (a LIST per page).
type countedBucket struct {
	*memBucket
	mu sync.Mutex
	n  map[string]int
}

// memStormLatency is each request's round trip in the in-memory storm:
// without one, a thousand tasks that never wait spin on two cores and
// starve the renewals of those that already hold an ID.
const memStormLatency = 2 * time.Millisecond

func (c *countedBucket) note(kind string, k int) {
	time.Sleep(memStormLatency)
	c.mu.Lock()
	c.n[kind] += k
	c.mu.Unlock()
}

func (c *countedBucket) List(ctx context.Context) (nodeid.Listing, error) {
	l, err := c.memBucket.List(ctx)
	pages := max(1, (len(l.Slots)+len(l.Tenures)+1+999)/1000)
	for range pages - 1 {
		time.Sleep(memStormLatency)
	}
	c.note("LIST", pages)
	return l, err
}

func (c *countedBucket) Get(ctx context.Context, id int) (nodeid.Record, error) {
	c.note("GET", 1)
	return c.memBucket.Get(ctx, id)
}

func (c *countedBucket) Marker(ctx context.Context) (nodeid.ClusterMarker, error) {
	c.note("GET", 1)
	return c.memBucket.Marker(ctx)
}

func (c *countedBucket) Create(ctx context.Context, l nodeid.Lease) (string, error) {
	c.note("PUT", 1)
	return c.memBucket.Create(ctx, l)
}

func (c *countedBucket) Write(ctx context.Context, l nodeid.Lease, etag string) (string, error) {
	c.note("PUT", 1)
	return c.memBucket.Write(ctx, l, etag)
}

func (c *countedBucket) CreateMarker(ctx context.Context, m nodeid.ClusterMarker) error {
	c.note("PUT", 1)
	return c.memBucket.CreateMarker(ctx, m)
}

func (c *countedBucket) CreateTenure(ctx context.Context, t nodeid.TenureObject) error {
	c.note("PUT", 1)
	return c.memBucket.CreateTenure(ctx, t)
}

func (c *countedBucket) total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := 0
	for _, v := range c.n {
		s += v
	}
	return int64(s)
}

// runMemStorm is runStorm on one memBucket shared by n in-process tasks.
func runMemStorm(ctx context.Context, strategy nodeid.AcquireStrategy, n int, cold bool, timeout time.Duration) (stormResult, error) {
	b := newMemBucket()
	if !cold {
		if err := nodeid.Initialize(ctx, b, n, "bench-bootstrap", nodeid.DefaultLeaseDuration); err != nil {
			return stormResult{}, fmt.Errorf("bootstrap: %w", err)
		}
	}
	msgs := &msgCounter{n: map[string]int{}}
	quiet := slog.New(msgs)
	var lostMu sync.Mutex
	var lost []error
	repos := make([]*countedBucket, n)
	ps := make([]*nodeid.Provider, n)
	for i := range n {
		repos[i] = &countedBucket{memBucket: b, n: map[string]int{}}
		p, err := nodeid.NewProvider(repos[i], nodeid.Config{
			TaskID: fmt.Sprintf("bench-mem-task-%04d", i), ClusterSize: n, Strategy: strategy,
			AcquireTimeout: timeout, Logger: quiet,
			OnLost: func(err error) { lostMu.Lock(); lost = append(lost, err); lostMu.Unlock() },
		})
		if err != nil {
			return stormResult{}, err
		}
		ps[i] = p
	}
	defer func() {
		var wg sync.WaitGroup
		for _, p := range ps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				p.Close(cctx)
			}()
		}
		wg.Wait()
	}()
	res := stormResult{PerTask: make([]float64, n), Ops: map[string]int{}, OpTime: map[string]time.Duration{}, OpWorst: map[string]time.Duration{}}
	ids := make([]int, n)
	errs := make([]error, n)
	opsAt := make([]map[string]int, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			inst, err := p.Acquire(ctx)
			res.PerTask[i] = float64(repos[i].total())
			repos[i].mu.Lock()
			opsAt[i] = maps.Clone(repos[i].n)
			repos[i].mu.Unlock()
			ids[i], errs[i] = inst.ID, err
		}()
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	res.Took = time.Since(t0)
	seen := map[int]int{}
	for i := range ps {
		if errs[i] != nil {
			return res, fmt.Errorf("task %d: %w", i, errs[i])
		}
		if j, dup := seen[ids[i]]; dup {
			return res, fmt.Errorf("tasks %d and %d both hold node %d", j, i, ids[i])
		}
		seen[ids[i]] = i
		res.Total += int64(res.PerTask[i])
		res.Attempts += ps[i].Stats().AcquireAttempts
		for k, v := range opsAt[i] {
			res.Ops[k] += v
		}
	}
	res.Waited = msgs.count("no node id free, waiting")
	lostMu.Lock()
	defer lostMu.Unlock()
	if len(lost) > 0 {
		return res, fmt.Errorf("%d leases lost during the storm, first: %v", len(lost), lost[0])
	}
	return res, nil
}

// stormMemory runs only the in-memory storms, for -memory-storm-only.
func stormMemory(ctx context.Context, o options, r *report) error {
	for _, n := range o.memStormSizes {
		for i := 0; i < min(o.reps, 2); i++ {
			for _, s := range strategies { // spread first: a sequential storm of 1,000 takes minutes
				for _, cold := range []bool{true, false} {
					res, err := runMemStorm(ctx, s, n, cold, max(o.stormTimeout, 10*time.Minute))
					if err != nil {
						return fmt.Errorf("storm of %d in memory, %s, cold=%t: %w", n, s, cold, err)
					}
					k := stormKey{n, inMemory.Name, cold, s}
					r.storm[k] = append(r.storm[k], res)
					progress("  N=%d in-memory cold=%-5t %-10s %7.3fs %7d requests, %d waited a poll", n, cold, s, res.Took.Seconds(), res.Total, res.Waited)
				}
			}
		}
	}
	return nil
}
