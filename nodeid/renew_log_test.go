package nodeid_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/faultproxy"
	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// During an outage every failed renewal warns, with the time left before
// the self-fence (a number that shrinks), the attempt and a short error:
// the only warning an operator gets before the holder fences itself.
func TestRenewalFailuresWarnWithTimeLeft(t *testing.T) {
	srv := s3test.NewFake(t)
	proxy := startProxy(t, srv)
	lost := newLossRecorder()
	cfg := fastConfig(t, "holder", 1, lost)
	var buf lockedBuffer
	cfg.Logger = slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var failures atomic.Int64
	cfg.OnEvent = func(e nodeid.Event) {
		if e.Kind == nodeid.EventRenewalFailed {
			failures.Add(1)
		}
	}
	holder := newProvider(t, newRepo(t, srv, proxy.URL), cfg)
	acquire(t, holder, 5*time.Second)
	waitFor(t, 3*time.Second, "a renewal", func() bool { return holder.Stats().Renewals > 0 })

	// 503 SlowDown first, then connections reset (no answer at all) until
	// the holder fences itself.
	proxy.Set(faultproxy.Fault{Methods: []string{http.MethodPut}, Status: http.StatusServiceUnavailable, ErrorCode: "SlowDown"})
	waitFor(t, 3*time.Second, "three failures", func() bool { return failures.Load() >= 3 })
	proxy.Set(faultproxy.Fault{Methods: []string{http.MethodPut}, Reset: true})
	waitFor(t, 5*time.Second, "the self-fence", func() bool { return lost.count() > 0 })
	time.Sleep(100 * time.Millisecond) // a renewal in flight at the fence

	var warns []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if rec["msg"] == "renewal failed" {
			warns = append(warns, rec)
		}
	}
	// A renewal that fails after the fence (sent just before it) is not
	// warned about: the loss line says it all.
	if n := int64(len(warns)); n < 3 || n < failures.Load()-1 || n > failures.Load() {
		t.Fatalf("%d \"renewal failed\" lines for %d failed renewals:\n%s", n, failures.Load(), buf.String())
	}
	prev := 1e9
	for i, rec := range warns {
		left, ok := rec["left_seconds"].(float64)
		if !ok || left < 0 || left >= prev {
			t.Errorf("line %d: left_seconds %v (after %v), want a number >= 0 that decreases", i, rec["left_seconds"], prev)
		}
		prev = left
		if rec["level"] != "WARN" || rec["attempt"] != float64(i+1) || rec["node_id"] == nil || rec["version"] == nil {
			t.Errorf("line %d: %v, want WARN, attempt %d, node_id and version", i, rec, i+1)
		}
		msg, _ := rec["err"].(string)
		if msg == "" || strings.Contains(msg, "RequestID: ,") || strings.Contains(msg, "StatusCode") {
			t.Errorf("line %d: err %q, want a short error without the SDK's empty fields", i, msg)
		}
	}
	if msg, _ := warns[0]["err"].(string); !strings.Contains(msg, "HTTP 503 SlowDown") {
		t.Errorf("first failure: err %q, want the 503 SlowDown", msg)
	}
	if msg, _ := warns[len(warns)-1]["err"].(string); !strings.Contains(msg, "storage unavailable") {
		t.Errorf("last failure: err %q, want the reset connection", msg)
	}
	t.Logf("%d warnings, first %v, last %v", len(warns), warns[0], warns[len(warns)-1])
}
