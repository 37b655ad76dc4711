// Package faultproxy is an HTTP reverse proxy that injects faults between
// an S3 client and an S3 server: delays, hanging requests, error answers,
// reset connections, lost answers to writes that did land, and removal of
// the conditional headers that some S3-compatible stores ignore.
//
// The fault can be changed at any time from any goroutine, so a test or a
// chaos experiment can, for example, let a client acquire a lease, then
// partition it (Blackhole) and later heal the partition:
//
//	p, err := faultproxy.Start(server.URL)
//	...
//	defer p.Close()
//	p.Set(faultproxy.Fault{Blackhole: true})
//	p.Set(faultproxy.Fault{}) // heal; held requests continue
//
// The proxy keeps the client's Host header, so SigV4 signatures computed
// for the proxy's address stay valid, and it does not add X-Forwarded-*
// headers. It speaks HTTP/1.1 only.
package faultproxy

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// Fault describes what the proxy does to the requests it matches. The zero
// Fault passes every request through unchanged.
//
// Latency and StripConditional apply to every matching request. The
// failing faults (Reset, Blackhole, Status, DropResponse) apply to a
// fraction Probability of them; when several are set, the first in that
// order wins. Latency comes first, and StripConditional combines with
// DropResponse (both act on forwarded requests).
type Fault struct {
	// Methods limits the fault to requests with these HTTP methods, e.g.
	// []string{"PUT"}. Empty means every request.
	Methods []string

	// Latency delays matching requests before anything else happens to
	// them, by Latency plus a uniformly random extra in [0, Jitter).
	Latency time.Duration
	Jitter  time.Duration

	// StripConditional removes If-Match and If-None-Match from forwarded
	// requests, simulating a store that ignores conditional writes. The
	// SDK signs both headers with SigV4, so a server that verifies
	// signatures answers 403 SignatureDoesNotMatch instead; gofakes3 does
	// not verify them.
	StripConditional bool

	// Reset closes the client's connection with a TCP reset instead of
	// forwarding: the server never sees the request.
	Reset bool

	// Blackhole holds requests without forwarding or answering them until
	// the fault changes (the request is then handled according to the new
	// fault, like a healed network partition), the client gives up, or the
	// proxy is closed.
	Blackhole bool

	// Status, if not zero, answers with this HTTP status and an S3-style
	// XML error body instead of forwarding. ErrorCode sets the body's
	// Code; when empty it is derived from Status (503 SlowDown, 500
	// InternalError, ...).
	Status    int
	ErrorCode string

	// DropResponse forwards the request, so a write lands, then closes the
	// client's connection instead of answering: the client cannot tell
	// whether its write happened. See also Proxy.DropNext.
	DropResponse bool

	// Probability is the fraction of matching requests that suffer the
	// failing faults, drawn from a generator seeded with Seed so runs are
	// reproducible. Zero means every matching request.
	Probability float64
	Seed        uint64
}

func (f *Fault) matches(method string) bool {
	return len(f.Methods) == 0 || slices.ContainsFunc(f.Methods, func(m string) bool { return strings.EqualFold(m, method) })
}

func (f *Fault) failing() bool {
	return f.Reset || f.Blackhole || f.Status != 0 || f.DropResponse
}

// Stats counts what the proxy did. Requests and ByMethod count each request
// once, on arrival; the other counts say what happened to them.
type Stats struct {
	Requests int
	ByMethod map[string]int

	Forwarded  int // sent to the target, including dropped ones
	Stripped   int // forwarded without their conditional headers
	Delayed    int
	Reset      int
	Blackholed int // held at least once
	Injected   int // answered with Fault.Status
	Dropped    int // forwarded, then the answer was not delivered
	Failed     int // the target could not be reached; answered 502
}

// Proxy is a running fault-injecting reverse proxy. Its methods may be
// called from any goroutine.
type Proxy struct {
	// URL is the proxy's address, "http://127.0.0.1:port".
	URL string

	target    *url.URL
	srv       *http.Server
	transport *http.Transport
	serveDone chan struct{}
	done      chan struct{} // closed by Close; wakes held requests

	mu      sync.Mutex
	fault   Fault
	rng     *rand.Rand
	changed chan struct{} // closed and replaced by every Set
	drops   []dropArm
	stats   Stats
	closed  bool
	active  sync.WaitGroup // running handlers; Add only under mu while !closed
}

type dropArm struct {
	method string
	n      int
}

// Start starts a proxy on a free port of 127.0.0.1 that forwards to target,
// an absolute http or https URL without a path, e.g. an S3 endpoint.
func Start(target string) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: target: %v", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("faultproxy: target %q is not an absolute http(s) URL", target)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		// Joining paths would re-encode object keys and break SigV4.
		return nil, fmt.Errorf("faultproxy: target %q must not have a path or query", target)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %v", err)
	}
	p := &Proxy{
		URL:    "http://" + ln.Addr().String(),
		target: u,
		transport: &http.Transport{
			Proxy:               nil, // never an HTTP_PROXY from the environment
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     30 * time.Second,
			DisableCompression:  true, // pass bodies through untouched
		},
		serveDone: make(chan struct{}),
		done:      make(chan struct{}),
		changed:   make(chan struct{}),
		rng:       newRand(0),
		stats:     Stats{ByMethod: map[string]int{}},
	}
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 30 * time.Second,
		// Aborted and dropped connections are the point of this proxy;
		// keep net/http's complaints about them out of the test log.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	go func() {
		defer close(p.serveDone)
		p.srv.Serve(ln)
	}()
	return p, nil
}

func newRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// Set replaces the current fault. Requests held by a Blackhole are
// re-evaluated against f. Set reseeds the random generator from f.Seed.
// It panics if f.Probability is outside [0, 1] or f.Status is not an HTTP
// status code, as those are programming errors.
func (p *Proxy) Set(f Fault) {
	if !(f.Probability >= 0 && f.Probability <= 1) {
		panic(fmt.Sprintf("faultproxy: Probability %v outside [0, 1]", f.Probability))
	}
	if f.Status != 0 && (f.Status < 100 || f.Status > 599) {
		panic(fmt.Sprintf("faultproxy: invalid Status %d", f.Status))
	}
	if f.Latency < 0 || f.Jitter < 0 {
		panic("faultproxy: negative Latency or Jitter")
	}
	f.Methods = slices.Clone(f.Methods)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fault = f
	p.rng = newRand(f.Seed)
	close(p.changed)
	p.changed = make(chan struct{})
}

// Pass removes the current fault and any drops armed by DropNext, so every
// request passes through.
func (p *Proxy) Pass() {
	p.Set(Fault{})
	p.mu.Lock()
	p.drops = nil
	p.mu.Unlock()
}

// Fault returns the current fault.
func (p *Proxy) Fault() Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.fault
	f.Methods = slices.Clone(f.Methods)
	return f
}

// DropNext arms the proxy to drop the answers of the next n requests with
// the given method ("" for any method) that it forwards, independently of
// the current Fault: those writes land, their answers are lost. Calls add
// up; arms are consumed in the order they were made.
func (p *Proxy) DropNext(method string, n int) {
	if n <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drops = append(p.drops, dropArm{method: method, n: n})
}

// Requests returns the number of requests the proxy has received.
func (p *Proxy) Requests() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats.Requests
}

// Stats returns a snapshot of the proxy's counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.ByMethod = make(map[string]int, len(p.stats.ByMethod))
	for k, v := range p.stats.ByMethod {
		s.ByMethod[k] = v
	}
	return s
}

// ResetStats sets all counters to zero.
func (p *Proxy) ResetStats() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats = Stats{ByMethod: map[string]int{}}
}

// Close stops the proxy: it stops accepting connections, aborts held and
// in-flight requests, and returns once all its goroutines have finished.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()

	close(p.done)
	err := p.srv.Close()
	<-p.serveDone
	p.active.Wait()
	p.transport.CloseIdleConnections()
	return err
}

// ServeHTTP implements the proxy. It is exported only to satisfy
// http.Handler; tests use the proxy through its URL.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		panic(http.ErrAbortHandler)
	}
	p.active.Add(1)
	p.stats.Requests++
	p.stats.ByMethod[r.Method]++
	p.mu.Unlock()
	defer p.active.Done()

	held := false
	for {
		f, fail, delay, changed := p.decide(r.Method)
		if delay > 0 {
			p.count(func(s *Stats) { s.Delayed++ })
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			case <-p.done:
				t.Stop()
				panic(http.ErrAbortHandler)
			}
		}
		switch {
		case fail && f.Reset:
			p.count(func(s *Stats) { s.Reset++ })
			resetConn(w)
			return
		case fail && f.Blackhole:
			if !held {
				held = true
				p.count(func(s *Stats) { s.Blackholed++ })
				// net/http notices that the client has gone only once
				// the request body has been read, so read it now.
				if !bufferBody(r) {
					return
				}
			}
			select {
			case <-changed:
				continue // handle the request under the new fault
			case <-r.Context().Done():
				return // the client gave up; nobody reads an answer
			case <-p.done:
				panic(http.ErrAbortHandler)
			}
		case fail && f.Status != 0:
			p.count(func(s *Stats) { s.Injected++ })
			writeS3Error(w, r, f.Status, f.ErrorCode)
			return
		}
		strip := f.matches(r.Method) && f.StripConditional
		p.forward(w, r, strip, fail && f.DropResponse)
		return
	}
}

// decide snapshots the fault for one request, rolls whether its failing
// part applies and computes its delay.
func (p *Proxy) decide(method string) (f Fault, fail bool, delay time.Duration, changed <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, changed = p.fault, p.changed
	if !f.matches(method) {
		return f, false, 0, changed
	}
	if f.failing() {
		fail = f.Probability == 0 || p.rng.Float64() < f.Probability
	}
	delay = f.Latency
	if f.Jitter > 0 {
		delay += time.Duration(p.rng.Int64N(int64(f.Jitter)))
	}
	return f, fail, delay, changed
}

func (p *Proxy) count(fn func(*Stats)) {
	p.mu.Lock()
	fn(&p.stats)
	p.mu.Unlock()
}

// takeDrop consumes one armed drop matching method, if any.
func (p *Proxy) takeDrop(method string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.drops {
		if d := &p.drops[i]; d.method == "" || strings.EqualFold(d.method, method) {
			d.n--
			if d.n == 0 {
				p.drops = slices.Delete(p.drops, i, i+1)
			}
			return true
		}
	}
	return false
}

// hopHeaders are meaningful only for a single connection and must not be
// forwarded (RFC 9110, section 7.6.1).
var hopHeaders = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func removeHopHeaders(h http.Header) {
	for _, v := range h.Values("Connection") {
		for name := range strings.SplitSeq(v, ",") {
			h.Del(strings.TrimSpace(name))
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, strip, drop bool) {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme = p.target.Scheme
	out.URL.Host = p.target.Host
	out.Host = r.Host // the client signed this Host
	out.Close = false
	removeHopHeaders(out.Header)
	if strip {
		out.Header.Del("If-Match")
		out.Header.Del("If-None-Match")
	}
	if r.ContentLength == 0 {
		out.Body = nil // a GET must not become a chunked request
	}

	// Consume an armed drop only for requests that reach the target.
	drop = p.takeDrop(r.Method) || drop
	p.count(func(s *Stats) {
		s.Forwarded++
		if strip {
			s.Stripped++
		}
	})
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client went away
		}
		p.count(func(s *Stats) { s.Failed++ })
		writeS3Error(w, r, http.StatusBadGateway, "")
		return
	}
	defer resp.Body.Close()

	if drop {
		// Let the target finish its answer, so the write has fully
		// happened, then lose it.
		io.Copy(io.Discard, resp.Body)
		p.count(func(s *Stats) { s.Dropped++ })
		closeConn(w, false)
		return
	}

	removeHopHeaders(resp.Header)
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	if _, ok := resp.Header["Date"]; !ok {
		// Do not let net/http invent a Date the server did not send.
		w.Header()["Date"] = nil
	}
	w.WriteHeader(resp.StatusCode)
	if _, err := io.Copy(w, resp.Body); err != nil {
		// The answer is incomplete; make sure the client notices.
		panic(http.ErrAbortHandler)
	}
}

// maxBuffered bounds the request body a Blackhole holds in memory.
const maxBuffered = 64 << 20

// bufferBody replaces r.Body by an in-memory copy. It reports false if the
// body could not be read, that is the client has gone.
func bufferBody(r *http.Request) bool {
	if r.Body == nil || r.Body == http.NoBody {
		return true
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBuffered))
	r.Body.Close()
	if err != nil {
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	return true
}

// resetConn closes the client's connection with a TCP RST.
func resetConn(w http.ResponseWriter) { closeConn(w, true) }

// closeConn closes the client's connection without an HTTP answer, with
// an RST if rst is set, else with a FIN.
func closeConn(w http.ResponseWriter, rst bool) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // closes the connection as well
	}
	if tc, ok := conn.(*net.TCPConn); ok && rst {
		tc.SetLinger(0)
	}
	conn.Close()
}

// errorCodes are the S3 error codes for statuses tests commonly inject.
var errorCodes = map[int]string{
	http.StatusBadRequest:          "BadRequest",
	http.StatusForbidden:           "AccessDenied",
	http.StatusNotFound:            "NoSuchKey",
	http.StatusConflict:            "ConditionalRequestConflict",
	http.StatusPreconditionFailed:  "PreconditionFailed",
	http.StatusInternalServerError: "InternalError",
	http.StatusNotImplemented:      "NotImplemented",
	http.StatusBadGateway:          "BadGateway",
	http.StatusServiceUnavailable:  "SlowDown",
	http.StatusGatewayTimeout:      "GatewayTimeout",
}

// ErrorCode returns the S3 error code the proxy uses for status when
// Fault.ErrorCode is empty.
func ErrorCode(status int) string {
	if c, ok := errorCodes[status]; ok {
		return c
	}
	return strings.ReplaceAll(http.StatusText(status), " ", "")
}

var xmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;")

// writeS3Error answers like S3 does, so SDKs parse the error code.
func writeS3Error(w http.ResponseWriter, r *http.Request, status int, code string) {
	if code == "" {
		code = ErrorCode(status)
	}
	body := fmt.Sprintf("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code><Message>injected by faultproxy</Message><RequestId>faultproxy</RequestId></Error>",
		xmlEscaper.Replace(code))
	h := w.Header()
	h.Set("Content-Type", "application/xml")
	h.Set("Content-Length", fmt.Sprint(len(body)))
	h.Set("X-Amz-Request-Id", "faultproxy")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		io.WriteString(w, body)
	}
}
