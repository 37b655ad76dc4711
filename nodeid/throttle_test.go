package nodeid_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/faultproxy"
	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// While S3 answers 503 SlowDown to a share of every request, reads and
// listings back off and retry (the SDK's standard retryer) and renewals
// retry until their deadline: no holder fences itself, every 503 is
// counted, and the repository logs the throttling once, not per request.
func TestThrottlingIsCountedAndFencesNoHolder(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		proxy := startProxy(t, srv)
		const n = 3
		repos := make([]*nodeid.S3Repository, n)
		logs := make([]*syncBuffer, n)
		ps := make([]*nodeid.Provider, n)
		for i := range n {
			repos[i] = newRepo(t, srv, proxy.URL)
			logs[i] = &syncBuffer{}
			repos[i].SetLogger(slog.New(slog.NewTextHandler(logs[i], nil)))
			cfg := fastConfig(t, fmt.Sprintf("task-%d", i), n, nil) // a loss fails the test
			cfg.Address = fmt.Sprintf("10.0.0.%d:26502", i+1)
			cfg.MappingsRefreshInterval = 200 * time.Millisecond
			ps[i] = newProvider(t, repos[i], cfg)
			acquire(t, ps[i], 20*time.Second)
		}
		proxy.ResetStats()
		proxy.Set(faultproxy.Fault{Status: 503, ErrorCode: "SlowDown", Probability: 0.3, Seed: 25})
		time.Sleep(3 * time.Second) // six renewals and about fifteen refreshes each
		proxy.Pass()
		injected := proxy.Stats().Injected
		var counted int64
		for i := range n {
			counted += repos[i].Throttled()
			if !ps[i].Valid() {
				t.Errorf("task-%d is no longer valid after the throttling", i)
			}
			if starts := strings.Count(logs[i].String(), "S3 is throttling requests"); starts != 1 {
				t.Errorf("task-%d logged the start of throttling %d times, want once:\n%s", i, starts, logs[i].String())
			}
		}
		if injected < 20 || counted != int64(injected) {
			t.Errorf("the proxy answered 503 to %d requests, the repositories counted %d", injected, counted)
		}
	})
}
