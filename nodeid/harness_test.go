package nodeid_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"

	"github.com/nodeid/nodeid/internal/faultproxy"
	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

func TestMain(m *testing.M) { s3test.VersityMain(m) }

const testPrefix = "cluster-a/"

// forEachServer runs f against the in-process gofakes3 and a real VersityGW.
func forEachServer(t *testing.T, f func(t *testing.T, srv *s3test.Server)) {
	t.Run("gofakes3", func(t *testing.T) { f(t, s3test.NewFake(t)) })
	t.Run("versitygw", func(t *testing.T) { f(t, s3test.StartVersity(t)) })
}

// newRepo returns a repository on srv's bucket through endpoint (srv.URL
// when empty), built the way production builds it.
func newRepo(t testing.TB, srv *s3test.Server, endpoint string) *nodeid.S3Repository {
	t.Helper()
	return newS3Repo(t, srv, endpoint, testPrefix, 2*time.Second)
}

// newS3Repo returns a repository on srv's bucket under prefix through
// endpoint (srv.URL when empty), with a client built the way production
// builds it and then changed by opts (a middleware that injects faults,
// say).
func newS3Repo(t testing.TB, srv *s3test.Server, endpoint, prefix string, requestTimeout time.Duration, opts ...func(*s3.Options)) *nodeid.S3Repository {
	t.Helper()
	if endpoint == "" {
		endpoint = srv.URL
	}
	client, err := nodeid.NewS3Client(context.Background(), nodeid.S3Config{
		Endpoint: endpoint, Region: srv.Region, PathStyle: true,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(opts) > 0 {
		client = s3.New(client.Options(), opts...)
	}
	repo, err := nodeid.NewS3Repository(client, srv.Bucket, prefix, requestTimeout)
	if err != nil {
		t.Fatal(err)
	}
	return repo
}

// beforeEveryRequest puts step first in the client's middleware: it sees
// each operation's input before anything is sent, and may answer in its
// place.
func beforeEveryRequest(name string, step func(context.Context, middleware.InitializeInput, middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error)) func(*s3.Options) {
	return func(o *s3.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc(name, step), middleware.Before)
		})
	}
}

// failWhileHolding returns a request hook (see beforeEveryRequest) that
// answers an injected 503 SlowDown to each request fails picks, once the
// provider newcomer points at holds its lease (the take itself needs those
// requests), and the count of requests it so failed.
func failWhileHolding(name string, newcomer *atomic.Pointer[nodeid.Provider], fails func(params any) bool) (func(*s3.Options), *atomic.Int64) {
	injected := new(atomic.Int64)
	return beforeEveryRequest(name, func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
		if fails(in.Parameters) {
			if p := newcomer.Load(); p != nil {
				if _, holding := p.Deadline(); holding {
					injected.Add(1)
					return middleware.InitializeOutput{}, middleware.Metadata{}, errors.New("injected: 503 SlowDown")
				}
			}
		}
		return next.HandleInitialize(ctx, in)
	}), injected
}

// lossRecorder collects OnLost calls.
type lossRecorder struct {
	mu   sync.Mutex
	errs []error
	at   []time.Time
	ch   chan error
}

func newLossRecorder() *lossRecorder { return &lossRecorder{ch: make(chan error, 100)} }

func (r *lossRecorder) onLost(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.at = append(r.at, time.Now())
	r.mu.Unlock()
	r.ch <- err
}

func (r *lossRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.errs)
}

// fastConfig is a configuration with short timings for real-clock tests:
// L=2s, R=500ms, m=400ms, T=400ms.
func fastConfig(t testing.TB, taskID string, size int, lost *lossRecorder) nodeid.Config {
	cfg := nodeid.Config{
		TaskID:         taskID,
		ClusterSize:    size,
		LeaseDuration:  2 * time.Second,
		RenewInterval:  500 * time.Millisecond,
		SafetyMargin:   400 * time.Millisecond,
		RequestTimeout: 400 * time.Millisecond,
		PollInterval:   100 * time.Millisecond,
		Logger:         testLogger(t),
	}
	if lost != nil {
		cfg.OnLost = lost.onLost
	} else {
		cfg.OnLost = func(err error) { t.Errorf("%s lost its lease unexpectedly: %v", taskID, err) }
	}
	return cfg
}

// roomyConfig is fastConfig with room for a stalled machine, for tests whose
// subject is not timing: a holder survives a stall of up to L - m - R = 6 s
// instead of 1.1 s. Not for a cluster whose marker records a shorter lease
// (Initialize with 2 s): Acquire refuses a longer one.
func roomyConfig(t testing.TB, taskID string, size int, lost *lossRecorder) nodeid.Config {
	cfg := fastConfig(t, taskID, size, lost)
	cfg.LeaseDuration, cfg.RenewInterval, cfg.SafetyMargin, cfg.RequestTimeout = 8*time.Second, time.Second, time.Second, 800*time.Millisecond
	return cfg
}

// doubled is cfg with L, R, m and T twice as long (L = 4 s from fastConfig):
// room for a 2.2 s stall, for tests that must still wait out an expiry.
func doubled(cfg nodeid.Config) nodeid.Config {
	cfg.LeaseDuration, cfg.RenewInterval, cfg.SafetyMargin, cfg.RequestTimeout = 2*cfg.LeaseDuration, 2*cfg.RenewInterval, 2*cfg.SafetyMargin, 2*cfg.RequestTimeout
	return cfg
}

func newProvider(t testing.TB, repo nodeid.Repository, cfg nodeid.Config) *nodeid.Provider {
	t.Helper()
	p, err := nodeid.NewProvider(repo, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	return p
}

func acquire(t testing.TB, p *nodeid.Provider, timeout time.Duration) nodeid.NodeInstance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	inst, err := p.Acquire(ctx)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	return inst
}

// testLogger writes the provider's log lines to the test log, so they show
// for failing tests and under -v only. NODEID_TEST_LOG=1 prints them live.
func testLogger(t testing.TB) *slog.Logger {
	var w io.Writer = testWriter{t}
	if os.Getenv("NODEID_TEST_LOG") != "" {
		w = os.Stderr
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// putRaw writes an object unconditionally, as an operator or a chaos script
// would, bypassing the protocol.
func putRaw(t testing.TB, srv *s3test.Server, key, body string, meta map[string]string) {
	t.Helper()
	_, err := srv.Client(t).PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String(srv.Bucket), Key: aws.String(key),
		Body: strings.NewReader(body), Metadata: meta,
	})
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// putLivePeer writes node 1's object from outside as held by the task
// "peer" at version v for another hour, its mappings recording known: the
// live peer whose mappings a test of node 0 consults. It returns the body
// and metadata written, for a test that writes them back.
func putLivePeer(t testing.TB, srv *s3test.Server, v nodeid.Version, known nodeid.VersionMappings) (string, map[string]string) {
	t.Helper()
	peer := nodeid.Lease{TaskID: "peer", Instance: nodeid.NodeInstance{ID: 1, Version: v},
		Expires: time.Now().Add(time.Hour), Duration: 2 * time.Second, Nonce: "n1", Acquirable: true,
		KnownVersions: known}
	body, meta := peer.Encode()
	putRaw(t, srv, nodeid.LeaseKey(testPrefix, 1), string(body), meta)
	return string(body), meta
}

func deleteRaw(t testing.TB, srv *s3test.Server, key string) {
	t.Helper()
	if _, err := srv.Client(t).DeleteObject(context.Background(), &s3.DeleteObjectInput{
		Bucket: aws.String(srv.Bucket), Key: aws.String(key),
	}); err != nil {
		t.Fatalf("delete %s: %v", key, err)
	}
}

// foreignLease is the body of a lease written by someone else, as the chaos
// lease-overwrite experiment writes it: with a timestamp of now, so the
// duration it claims (Record.ClaimedDuration) is about a second and waiters
// judge it by the lease durations under test.
func foreignLease(task string, id int, version int64) (string, map[string]string) {
	body := fmt.Sprintf(`{"taskId":%q,"timestamp":%d,"nodeInstance":{"id":%d,"version":%d},"knownVersionMappings":{"mappingsByNodeId":{}}}`,
		task, time.Now().UnixMilli(), id, version)
	return body, map[string]string{"taskid": task, "version": fmt.Sprint(version), "acquirable": "true"}
}

// waitFor polls cond every 10ms until it holds or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// countingRepo counts the calls of one task's provider by kind, around a
// real repository. A Write whose ETag is one this wrapper's own Writes
// returned rewrites our own lease (a renewal or a release); any other Write
// is a take (Create makes never-held objects, taken by a Write). Counting calls, not HTTP requests, leaves out SDK retries.
type countingRepo struct {
	nodeid.Repository
	mu     sync.Mutex
	calls  map[string]int
	ours   map[string]bool
	frozen bool // stop counting (the phase under test is over)
}

func newCountingRepo(r nodeid.Repository) *countingRepo {
	return &countingRepo{Repository: r, calls: map[string]int{}, ours: map[string]bool{}}
}

func (c *countingRepo) note(kind string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.frozen {
		c.calls[kind]++
	}
}

// count returns the calls of the given kinds so far.
func (c *countingRepo) count(kinds ...string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, k := range kinds {
		n += c.calls[k]
	}
	return n
}

func (c *countingRepo) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.calls)
}

func (c *countingRepo) freeze() {
	c.mu.Lock()
	c.frozen = true
	c.mu.Unlock()
}

func (c *countingRepo) List(ctx context.Context) (nodeid.Listing, error) {
	c.note("list")
	return c.Repository.List(ctx)
}

func (c *countingRepo) Get(ctx context.Context, id int) (nodeid.Record, error) {
	c.note("get")
	return c.Repository.Get(ctx, id)
}

func (c *countingRepo) Marker(ctx context.Context) (nodeid.ClusterMarker, error) {
	c.note("marker")
	return c.Repository.Marker(ctx)
}

func (c *countingRepo) CreateMarker(ctx context.Context, m nodeid.ClusterMarker) error {
	c.note("create-marker")
	return c.Repository.CreateMarker(ctx, m)
}

func (c *countingRepo) Create(ctx context.Context, l nodeid.Lease) (string, error) {
	c.note("create")
	return c.Repository.Create(ctx, l)
}

func (c *countingRepo) Write(ctx context.Context, l nodeid.Lease, etag string) (string, error) {
	c.mu.Lock()
	kind := "take"
	if c.ours[etag] {
		kind = "rewrite"
	}
	c.mu.Unlock()
	c.note(kind)
	etag, err := c.Repository.Write(ctx, l, etag)
	c.own(etag, err)
	return etag, err
}

func (c *countingRepo) own(etag string, err error) {
	if err == nil && etag != "" {
		c.mu.Lock()
		c.ours[etag] = true
		c.mu.Unlock()
	}
}

// logBook keeps a provider's log lines, so a test can wait for the line
// that shows a code path ran.
type logBook struct {
	mu    sync.Mutex
	lines []string
}

func (b *logBook) Write(p []byte) (int, error) {
	b.mu.Lock()
	b.lines = append(b.lines, strings.Split(strings.TrimRight(string(p), "\n"), "\n")...)
	b.mu.Unlock()
	return len(p), nil
}

// count returns how many lines contain s.
func (b *logBook) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, l := range b.lines {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// withLogBook makes cfg's logger write to a new logBook too.
func withLogBook(t testing.TB, cfg nodeid.Config) (nodeid.Config, *logBook) {
	b := &logBook{}
	var w io.Writer = testWriter{t}
	if os.Getenv("NODEID_TEST_LOG") != "" {
		w = os.Stderr
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(w, b), &slog.HandlerOptions{Level: slog.LevelDebug}))
	return cfg, b
}

func startProxy(t *testing.T, srv *s3test.Server) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}
