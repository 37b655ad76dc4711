package main

import (
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// opCounter is a reverse proxy that counts S3 operations by kind. The fault
// proxy counts HTTP methods only, and a ListObjectsV2 is a GET like a
// GetObject, but the two are priced differently (LIST like a PUT, 12.5 times
// a GET). It keeps the client's Host header, which SigV4 signs.
type opCounter struct {
	URL string
	srv *http.Server

	mu     sync.Mutex
	counts map[string]int
}

func startCounter(target string) (*opCounter, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &opCounter{URL: "http://" + ln.Addr().String(), counts: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	c.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.counts[opKind(r)]++
		c.mu.Unlock()
		rp.ServeHTTP(w, r)
	})}
	go c.srv.Serve(ln)
	return c, nil
}

// opKind names the S3 operation of a path-style request.
func opKind(r *http.Request) string {
	key := strings.Trim(r.URL.Path, "/")
	_, key, _ = strings.Cut(key, "/") // drop the bucket
	switch {
	case r.Method == http.MethodGet && key == "":
		return "LIST"
	case r.Method == http.MethodGet:
		return "GET"
	case r.Method == http.MethodPut:
		return "PUT"
	case r.Method == http.MethodHead:
		return "HEAD"
	}
	return r.Method
}

func (c *opCounter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts = map[string]int{}
}

func (c *opCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		m[k] = v
	}
	return m
}

func (c *opCounter) close() { c.srv.Close() }

// opStats counts the requests of in-process clients by operation, with
// their summed latency, to explain where a storm spends its time.
type opStats struct {
	mu    sync.Mutex
	n     map[string]int
	dur   map[string]time.Duration
	worst map[string]time.Duration
}

func newOpStats() *opStats {
	return &opStats{n: map[string]int{}, dur: map[string]time.Duration{}, worst: map[string]time.Duration{}}
}

func (s *opStats) snapshot() (n map[string]int, sum, worst map[string]time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.n), maps.Clone(s.dur), maps.Clone(s.worst)
}

// opClient is an s3.HTTPClient that records every request in st.
type opClient struct {
	inner s3.HTTPClient
	st    *opStats
}

func (c opClient) Do(req *http.Request) (*http.Response, error) {
	t0 := time.Now()
	resp, err := c.inner.Do(req)
	d := time.Since(t0)
	k := opKind(req)
	c.st.mu.Lock()
	c.st.n[k]++
	c.st.dur[k] += d
	c.st.worst[k] = max(c.st.worst[k], d)
	c.st.mu.Unlock()
	return resp, err
}

// withOpStats returns a copy of client whose requests are recorded in st.
func withOpStats(client *s3.Client, st *opStats) *s3.Client {
	return s3.New(client.Options(), func(o *s3.Options) { o.HTTPClient = opClient{inner: o.HTTPClient, st: st} })
}
