package main

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// stuckWriter blocks every Write until released, as a full pipe does.
type stuckWriter struct {
	release chan struct{}
	mu      sync.Mutex
	got     bytes.Buffer
}

func (w *stuckWriter) Write(b []byte) (int, error) {
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.got.Write(b)
}

// Issue 23.1: with stderr stuck, log writes neither block nor pile up
// without bound: what does not fit the queue is dropped and counted, and
// Close gives up after its timeout.
func TestLogWriterDropsAndCountsWhenStderrIsStuck(t *testing.T) {
	w := &stuckWriter{release: make(chan struct{})}
	lw := newLogWriter(w)
	n := 3 * logQueueLines
	for range n {
		if _, err := lw.Write([]byte("line\n")); err != nil {
			t.Fatal(err)
		}
	}
	// One line may be in the drain goroutine's hands, the queue holds the rest.
	if d := lw.dropped.Load(); d < uint64(n-logQueueLines-1) {
		t.Errorf("dropped %d of %d lines, want at least %d", d, n, n-logQueueLines-1)
	}
	if lw.Close(10 * time.Millisecond) {
		t.Error("Close reported the queue written while stderr is stuck")
	}
	close(w.release)
	if !lw.Close(5 * time.Second) {
		t.Fatal("queue not written after stderr moved again")
	}
	w.mu.Lock()
	lines := bytes.Count(w.got.Bytes(), []byte("\n"))
	w.mu.Unlock()
	if want := n - int(lw.dropped.Load()); lines != want {
		t.Errorf("wrote %d lines, want the %d not dropped", lines, want)
	}
}
