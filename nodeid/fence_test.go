package nodeid_test

import (
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/faultproxy"
	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// blockingWriter blocks every Write once armed, as a stderr whose reader
// has stalled (a log driver in blocking mode) does, until released.
type blockingWriter struct {
	mu      sync.Mutex
	armed   bool
	release chan struct{}
}

func (w *blockingWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	armed := w.armed
	w.mu.Unlock()
	if armed {
		<-w.release
	}
	return len(b), nil
}

func (w *blockingWriter) arm() {
	w.mu.Lock()
	w.armed = true
	w.mu.Unlock()
}

// Issue 23.1: the fence runs before anything the loss does that can block.
// With the logger stuck on its first write, a lease overwritten, deleted or
// corrupted from outside, or a deadline passing while S3 holds every
// request, still reaches OnFence; OnLost (after the log line)
// does not run until the logger moves again.
func TestOnFenceRunsBeforeABlockedLogger(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(t *testing.T, srv *s3test.Server, proxy *faultproxy.Proxy, key string, inst nodeid.NodeInstance)
	}{
		{"overwritten", func(t *testing.T, srv *s3test.Server, _ *faultproxy.Proxy, key string, inst nodeid.NodeInstance) {
			body, meta := foreignLease("intruder", inst.ID, int64(inst.Version))
			putRaw(t, srv, key, body, meta)
		}},
		{"deleted", func(t *testing.T, srv *s3test.Server, _ *faultproxy.Proxy, key string, _ nodeid.NodeInstance) {
			deleteRaw(t, srv, key)
		}},
		{"corrupt", func(t *testing.T, srv *s3test.Server, _ *faultproxy.Proxy, key string, _ nodeid.NodeInstance) {
			putRaw(t, srv, key, "{not json", nil)
		}},
		// S3 holds every request: the watchdog fences at the deadline.
		{"deadline", func(t *testing.T, _ *s3test.Server, proxy *faultproxy.Proxy, _ string, _ nodeid.NodeInstance) {
			proxy.Set(faultproxy.Fault{Blackhole: true})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachServer(t, func(t *testing.T, srv *s3test.Server) {
				proxy := startProxy(t, srv)
				w := &blockingWriter{release: make(chan struct{})}
				lost := newLossRecorder()
				cfg := fastConfig(t, "holder", 1, lost)
				cfg.Logger = slog.New(slog.NewTextHandler(w, nil))
				fenced := make(chan *nodeid.LostError, 1)
				cfg.OnFence = func(err *nodeid.LostError) { fenced <- err }
				p := newProvider(t, newRepo(t, srv, proxy.URL), cfg)
				inst := acquire(t, p, 10*time.Second)
				t.Cleanup(func() { close(w.release); proxy.Pass() }) // before the provider's Close
				w.arm()
				tc.fault(t, srv, proxy, testPrefix+nodeid.LeaseKey("", inst.ID), inst)
				select {
				case err := <-fenced:
					if err.Instance != inst {
						t.Errorf("fenced %v, want %v", err.Instance, inst)
					}
				case <-time.After(3 * time.Second):
					t.Fatal("OnFence not called within 3s of the fault while the logger blocks")
				}
				if p.Valid() {
					t.Error("Valid after OnFence")
				}
				if n := lost.count(); n != 0 {
					t.Errorf("OnLost ran %d times while the logger still blocks: it must come after the log line", n)
				}
			})
		})
	}
}
