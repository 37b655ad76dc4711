package faultproxy_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/nodeid/nodeid/internal/faultproxy"
	"github.com/nodeid/nodeid/internal/poll"
	"github.com/nodeid/nodeid/internal/s3test"
)

func TestMain(m *testing.M) { s3test.VersityMain(m) }

// backend is a plain HTTP server that records what reaches it.
type backend struct {
	*httptest.Server
	hits atomic.Int32
	last atomic.Pointer[http.Request]
	body atomic.Pointer[string]
}

func newBackend(t *testing.T) *backend {
	b := &backend{}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		body, _ := io.ReadAll(r.Body)
		s := string(body)
		b.body.Store(&s)
		b.last.Store(r)
		w.Header().Set("Date", "Sun, 06 Nov 1994 08:49:37 GMT")
		w.Header().Set("X-Echo", r.Method+" "+r.URL.RequestURI())
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "hello from backend")
	}))
	t.Cleanup(b.Close)
	return b
}

func start(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// do sends one request through a fresh client, so connections do not
// outlive the test.
func do(t *testing.T, method, url, body string, timeout time.Duration, hdr ...string) (*http.Response, string, error) {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: timeout}
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

func TestPass(t *testing.T) {
	b := newBackend(t)
	p := start(t, b.URL)
	resp, body, err := do(t, "PUT", p.URL+"/bucket/a%2Fb?x=1", "payload", 5*time.Second, "If-Match", `"e"`)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusCreated || body != "hello from backend" {
		t.Errorf("got %d %q", resp.StatusCode, body)
	}
	if got := resp.Header.Get("X-Echo"); got != "PUT /bucket/a%2Fb?x=1" {
		t.Errorf("backend saw %q; the path's encoding must survive (SigV4)", got)
	}
	if got := resp.Header.Get("Date"); got != "Sun, 06 Nov 1994 08:49:37 GMT" {
		t.Errorf("Date = %q, want the backend's", got)
	}
	r := b.last.Load()
	if r.Host != strings.TrimPrefix(p.URL, "http://") {
		t.Errorf("backend saw Host %q, want the proxy's %q (SigV4 signs it)", r.Host, p.URL)
	}
	if r.Header.Get("If-Match") != `"e"` || *b.body.Load() != "payload" {
		t.Errorf("backend saw If-Match %q body %q", r.Header.Get("If-Match"), *b.body.Load())
	}
	do(t, "GET", p.URL+"/", "", 5*time.Second)
	st := p.Stats()
	if st.Requests != 2 || p.Requests() != 2 || st.ByMethod["PUT"] != 1 || st.ByMethod["GET"] != 1 || st.Forwarded != 2 {
		t.Errorf("stats = %+v", st)
	}
	p.ResetStats()
	if st := p.Stats(); st.Requests != 0 || len(st.ByMethod) != 0 {
		t.Errorf("after ResetStats: %+v", st)
	}
}

func TestStartRejectsBadTargets(t *testing.T) {
	for _, target := range []string{"", "127.0.0.1:80", "ftp://x", "http://h/path", "http://h/?q=1"} {
		if p, err := faultproxy.Start(target); err == nil {
			p.Close()
			t.Errorf("Start(%q) succeeded", target)
		}
	}
}

func TestStripConditionalPlain(t *testing.T) {
	b := newBackend(t)
	p := start(t, b.URL)
	p.Set(faultproxy.Fault{StripConditional: true, Methods: []string{"PUT"}})
	do(t, "PUT", p.URL+"/k", "x", 5*time.Second, "If-Match", `"e"`, "If-None-Match", "*", "X-Other", "kept")
	r := b.last.Load()
	if r.Header.Get("If-Match") != "" || r.Header.Get("If-None-Match") != "" || r.Header.Get("X-Other") != "kept" {
		t.Errorf("backend saw headers %v", r.Header)
	}
	// Methods limits the fault.
	do(t, "GET", p.URL+"/k", "", 5*time.Second, "If-None-Match", `"e"`)
	if got := b.last.Load().Header.Get("If-None-Match"); got != `"e"` {
		t.Errorf("GET lost If-None-Match: %q", got)
	}
	if st := p.Stats(); st.Stripped != 1 {
		t.Errorf("Stripped = %d, want 1", st.Stripped)
	}
}

func isStatus(err error, status int, code string) bool {
	var re *smithyhttp.ResponseError
	var ae smithy.APIError
	return errors.As(err, &re) && re.HTTPStatusCode() == status && errors.As(err, &ae) && ae.ErrorCode() == code
}

func putObject(t *testing.T, c *s3.Client, bucket, key, body string, ifNoneMatch bool) (*s3.PutObjectOutput, error) {
	t.Helper()
	in := &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body)}
	if ifNoneMatch {
		in.IfNoneMatch = aws.String("*")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	return c.PutObject(ctx, in)
}

// TestStripConditionalS3 shows the simulated store that ignores
// conditional writes: the second create overwrites instead of failing.
func TestStripConditionalS3(t *testing.T) {
	s := s3test.NewFake(t)
	p := start(t, s.URL)
	c := s.Client(t, s3test.WithEndpoint(p.URL), s3test.WithoutRetries())

	if _, err := putObject(t, c, s.Bucket, "k", "one", true); err != nil {
		t.Fatal(err)
	}
	if _, err := putObject(t, c, s.Bucket, "k", "two", true); !isStatus(err, 412, "PreconditionFailed") {
		t.Fatalf("without the fault: %v, want 412", err)
	}
	p.Set(faultproxy.Fault{StripConditional: true})
	if _, err := putObject(t, c, s.Bucket, "k", "two", true); err != nil {
		t.Fatalf("with conditional headers stripped: %v, want success", err)
	}
	if got := getObject(t, s.Client(t), s.Bucket, "k"); got != "two" {
		t.Errorf("body = %q, want the overwrite", got)
	}
}

// TestStripConditionalVersity records that a server verifying SigV4
// refuses the altered request, because the SDK signs If-None-Match.
func TestStripConditionalVersity(t *testing.T) {
	s := s3test.StartVersity(t)
	p := start(t, s.URL)
	c := s.Client(t, s3test.WithEndpoint(p.URL), s3test.WithoutRetries())
	if _, err := putObject(t, c, s.Bucket, "k", "one", true); err != nil {
		t.Fatalf("through the proxy without a fault: %v", err)
	}
	p.Set(faultproxy.Fault{StripConditional: true})
	_, err := putObject(t, c, s.Bucket, "k", "two", true)
	if !isStatus(err, http.StatusForbidden, "SignatureDoesNotMatch") {
		t.Fatalf("got %v, want 403 SignatureDoesNotMatch", err)
	}
}

func TestBlackhole(t *testing.T) {
	b := newBackend(t)
	p := start(t, b.URL)
	p.Set(faultproxy.Fault{Blackhole: true})

	// The client gives up.
	if _, _, err := do(t, "PUT", p.URL+"/k", "x", 100*time.Millisecond); err == nil || !isTimeout(err) {
		t.Fatalf("got %v, want a timeout", err)
	}
	if b.hits.Load() != 0 {
		t.Fatal("blackholed request reached the backend")
	}

	// A held request continues once the fault is lifted.
	type result struct {
		resp *http.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, _, err := do(t, "PUT", p.URL+"/k", "late", 10*time.Second)
		done <- result{resp, err}
	}()
	if err := poll.Until(t.Context(), 5*time.Second, 5*time.Millisecond, "two held requests", func() bool { return p.Stats().Blackholed == 2 }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		t.Fatal("blackholed request was answered")
	case <-time.After(50 * time.Millisecond):
	}
	p.Set(faultproxy.Fault{})
	r := <-done
	if r.err != nil || r.resp.StatusCode != http.StatusCreated {
		t.Fatalf("after healing: %v", r.err)
	}
	if b.hits.Load() != 1 || *b.body.Load() != "late" {
		t.Errorf("backend hits %d body %q", b.hits.Load(), *b.body.Load())
	}
	// The request that timed out was dropped, not delivered late.
	if st := p.Stats(); st.Forwarded != 1 {
		t.Errorf("Forwarded = %d, want 1", st.Forwarded)
	}
}

func TestBlackholeClose(t *testing.T) {
	b := newBackend(t)
	before := runtime.NumGoroutine()
	p, err := faultproxy.Start(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	p.Set(faultproxy.Fault{Blackhole: true})
	errc := make(chan error, 3)
	for range 3 {
		go func() {
			_, _, err := do(t, "GET", p.URL+"/k", "", 10*time.Second)
			errc <- err
		}()
	}
	if err := poll.Until(t.Context(), 5*time.Second, 5*time.Millisecond, "three held requests", func() bool { return p.Stats().Blackholed == 3 }); err != nil {
		t.Fatal(err)
	}
	p.Close()
	for range 3 {
		// Failed by Close, not by the client giving up.
		if err := <-errc; err == nil || isTimeout(err) {
			t.Errorf("held request after Close: %v, want a failure other than a timeout", err)
		}
	}
	p.Close() // idempotent
	b.CloseClientConnections()
	if err := poll.Until(t.Context(), 5*time.Second, 5*time.Millisecond, "the proxy's goroutines to end", func() bool { return runtime.NumGoroutine() <= before }); err != nil {
		t.Fatal(err)
	}
}

func TestLatency(t *testing.T) {
	b := newBackend(t)
	p := start(t, b.URL)
	p.Set(faultproxy.Fault{Latency: 100 * time.Millisecond, Jitter: 50 * time.Millisecond, Methods: []string{"PUT"}})
	for range 3 {
		t0 := time.Now()
		if _, _, err := do(t, "PUT", p.URL+"/k", "x", 5*time.Second); err != nil {
			t.Fatal(err)
		}
		// A lower bound only: a loaded machine may add any delay.
		if d := time.Since(t0); d < 100*time.Millisecond {
			t.Errorf("PUT took %v, want at least the 100ms latency", d)
		}
	}
	if _, _, err := do(t, "GET", p.URL+"/k", "", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// The GET was not delayed: the proxy counts each delay it applies.
	if st := p.Stats(); st.Delayed != 3 || st.ByMethod["GET"] != 1 {
		t.Errorf("Delayed = %d after 3 PUTs and %d GET, want 3: the fault is for PUT only", st.Delayed, st.ByMethod["GET"])
	}
}

func TestStatus(t *testing.T) {
	s := s3test.NewFake(t)
	p := start(t, s.URL)
	c := s.Client(t, s3test.WithEndpoint(p.URL), s3test.WithoutRetries())

	p.Set(faultproxy.Fault{Status: http.StatusServiceUnavailable})
	_, err := putObject(t, c, s.Bucket, "k", "x", true)
	if !isStatus(err, 503, "SlowDown") {
		t.Fatalf("got %v, want 503 SlowDown", err)
	}
	p.Set(faultproxy.Fault{Status: 500})
	_, err = c.HeadObject(t.Context(), &s3.HeadObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String("k")})
	// A HEAD answer has no body, so the SDK derives the code from the
	// status text.
	if !isStatus(err, 500, "InternalServerError") {
		t.Fatalf("HEAD got %v, want 500", err)
	}
	p.Set(faultproxy.Fault{Status: 409, ErrorCode: "ConditionalRequestConflict"})
	if _, err := putObject(t, c, s.Bucket, "k", "x", true); !isStatus(err, 409, "ConditionalRequestConflict") {
		t.Fatalf("got %v, want 409", err)
	}
	if st := p.Stats(); st.Injected != 3 || st.Forwarded != 0 {
		t.Errorf("stats %+v, want 3 injected, none forwarded", st)
	}
	p.Set(faultproxy.Fault{})
	if _, err := putObject(t, c, s.Bucket, "k", "x", true); err != nil {
		t.Fatalf("after the fault: %v", err)
	}
}

// TestProbability checks that a fraction of requests fail and that the
// same seed fails the same requests.
func TestProbability(t *testing.T) {
	b := newBackend(t)
	p := start(t, b.URL)
	run := func(seed uint64) string {
		p.Set(faultproxy.Fault{Status: 503, Probability: 0.3, Seed: seed})
		var pattern strings.Builder
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr}
		for range 200 {
			resp, err := c.Get(p.URL + "/k")
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 503 {
				pattern.WriteByte('x')
			} else {
				pattern.WriteByte('.')
			}
		}
		return pattern.String()
	}
	a, a2, other := run(1), run(1), run(2)
	if n := strings.Count(a, "x"); n < 30 || n > 90 {
		t.Errorf("%d of 200 requests failed at probability 0.3", n)
	}
	if a != a2 {
		t.Error("same seed gave different failures")
	}
	if a == other {
		t.Error("different seeds gave the same failures")
	}
}

// TestDropNext loses the answer to a write that lands.
func TestDropNext(t *testing.T) {
	s := s3test.NewFake(t)
	p := start(t, s.URL)
	c := s.Client(t, s3test.WithEndpoint(p.URL), s3test.WithoutRetries())
	direct := s.Client(t)

	p.DropNext("PUT", 1)
	// GETs do not consume the PUT arm.
	if _, err := c.ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: aws.String(s.Bucket)}); err != nil {
		t.Fatal(err)
	}
	if _, err := putObject(t, c, s.Bucket, "k", "landed", true); err == nil {
		t.Fatal("PUT succeeded though its answer was to be dropped")
	} else if httpStatusOf(err) != 0 {
		t.Fatalf("got an HTTP answer: %v", err)
	} else {
		t.Logf("client saw: %v", err)
	}
	if got := getObject(t, direct, s.Bucket, "k"); got != "landed" {
		t.Fatalf("the write did not land: %q", got)
	}
	// The arm is used up; the retry now sees the object it created.
	if _, err := putObject(t, c, s.Bucket, "k", "again", true); !isStatus(err, 412, "PreconditionFailed") {
		t.Fatalf("second PUT: %v, want 412", err)
	}
	if st := p.Stats(); st.Dropped != 1 || st.Forwarded != 3 {
		t.Errorf("stats %+v", st)
	}
}

func TestDropResponseFault(t *testing.T) {
	b := newBackend(t)
	p := start(t, b.URL)
	p.Set(faultproxy.Fault{DropResponse: true, Methods: []string{"DELETE"}})
	if _, _, err := do(t, "DELETE", p.URL+"/k", "", 5*time.Second); err == nil {
		t.Fatal("DELETE was answered")
	}
	if b.hits.Load() != 1 {
		t.Fatalf("backend hits = %d, want 1", b.hits.Load())
	}
	if _, _, err := do(t, "GET", p.URL+"/k", "", 5*time.Second); err != nil {
		t.Fatalf("GET: %v", err)
	}
}

func TestReset(t *testing.T) {
	b := newBackend(t)
	p := start(t, b.URL)
	p.Set(faultproxy.Fault{Reset: true})
	_, _, err := do(t, "PUT", p.URL+"/k", "x", 5*time.Second)
	t.Logf("client saw: %v", err)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("got %v, want a connection reset", err)
	}
	if b.hits.Load() != 0 {
		t.Error("reset request reached the backend")
	}
	if st := p.Stats(); st.Reset != 1 {
		t.Errorf("Reset = %d", st.Reset)
	}
}

func TestUnreachableTarget(t *testing.T) {
	b := newBackend(t)
	p := start(t, b.URL)
	b.Close()
	resp, body, err := do(t, "GET", p.URL+"/k", "", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "<Code>BadGateway</Code>") {
		t.Errorf("got %d %q", resp.StatusCode, body)
	}
}

func TestSetValidates(t *testing.T) {
	p := start(t, "http://127.0.0.1:1")
	for _, f := range []faultproxy.Fault{{Probability: 1.5}, {Probability: -0.1}, {Status: 42}, {Latency: -1}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Set(%+v) did not panic", f)
				}
			}()
			p.Set(f)
		}()
	}
}

func TestErrorCode(t *testing.T) {
	for status, want := range map[int]string{503: "SlowDown", 500: "InternalError", 412: "PreconditionFailed", 429: "TooManyRequests"} {
		if got := faultproxy.ErrorCode(status); got != want {
			t.Errorf("ErrorCode(%d) = %q, want %q", status, got, want)
		}
	}
}

func httpStatusOf(err error) int {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

func getObject(t *testing.T, c *s3.Client, bucket, key string) string {
	t.Helper()
	out, err := c.GetObject(t.Context(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer out.Body.Close()
	b, _ := io.ReadAll(out.Body)
	return string(b)
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

// TestDropNextSDKRetry records what the lease protocol must expect: the
// SDK's default retryer resends a PUT whose answer was lost, and the
// resent conditional create fails on the object its first attempt made.
func TestDropNextSDKRetry(t *testing.T) {
	s := s3test.NewFake(t)
	p := start(t, s.URL)
	c := s.Client(t, s3test.WithEndpoint(p.URL))
	p.DropNext("PUT", 1)
	_, err := putObject(t, c, s.Bucket, "k", "landed", true)
	if !isStatus(err, 412, "PreconditionFailed") {
		t.Fatalf("got %v, want 412 for the retry of a landed create", err)
	}
	if st := p.Stats(); st.ByMethod["PUT"] != 2 || st.Dropped != 1 {
		t.Errorf("stats %+v, want 2 PUTs of which 1 dropped", st)
	}
}
