package main

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// logFlushTimeout bounds the wait for queued log lines at the end.
const logFlushTimeout = 2 * time.Second

// logQueueLines bounds the log lines waiting for a slow stderr.
const logQueueLines = 1024

// logWriter is the supervisor's stderr for its log lines: Write never
// blocks. Lines go through a bounded queue to a goroutine that writes them;
// when the queue is full (stderr's reader stalled: a log driver in blocking
// mode, a full pipe) the line is dropped and counted. So no log line can
// hold up the fence, the renewals or the stop sequence.
type logWriter struct {
	w       io.Writer
	queue   chan []byte
	dropped atomic.Uint64
	done    chan struct{}

	closeOnce sync.Once
	closed    atomic.Bool
	mu        sync.Mutex // held by Write around the send; Close takes it to close the queue
}

func newLogWriter(w io.Writer) *logWriter {
	lw := &logWriter{w: w, queue: make(chan []byte, logQueueLines), done: make(chan struct{})}
	go lw.drain()
	return lw
}

func (lw *logWriter) drain() {
	defer close(lw.done)
	for b := range lw.queue {
		_, _ = lw.w.Write(b)
	}
}

// Write queues a copy of b (slog writes one line per call), or drops it.
func (lw *logWriter) Write(b []byte) (int, error) {
	if lw.closed.Load() {
		lw.dropped.Add(1)
		return len(b), nil
	}
	line := append([]byte(nil), b...)
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.closed.Load() {
		lw.dropped.Add(1)
		return len(b), nil
	}
	select {
	case lw.queue <- line:
	default:
		lw.dropped.Add(1)
	}
	return len(b), nil
}

// Close stops taking lines and waits up to timeout for the queued ones to
// be written, so they come before the final error line. It reports whether
// they were.
func (lw *logWriter) Close(timeout time.Duration) bool {
	lw.closeOnce.Do(func() {
		lw.mu.Lock()
		lw.closed.Store(true)
		close(lw.queue)
		lw.mu.Unlock()
	})
	select {
	case <-lw.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// writeBounded writes the final error line, waiting at most
// logFlushTimeout: a stderr nobody reads must not keep nodeid-init from
// exiting (ECS replaces the task only once it has).
func writeBounded(w io.Writer, line string) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fmt.Fprintln(w, line)
	}()
	select {
	case <-done:
	case <-time.After(logFlushTimeout):
	}
}

// registerLogDrops exports the count of dropped lines.
func registerLogDrops(reg *prometheus.Registry, lw *logWriter) {
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "nodeid_log_lines_dropped_total",
		Help: "Log lines of nodeid-init dropped because stderr did not take them in time (its reader stalled)."},
		func() float64 { return float64(lw.dropped.Load()) }))
}
