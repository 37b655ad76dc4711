// Command testbroker is the stand-in broker of the chaos experiments. Run
// under `nodeid-init run`, it appends records stamped with its identity
// (node ID, version, task ID, sequence) to records-v<version>.log in
// NODE_DATA_DIR, and reports every write to its event log, which the
// invariant checker (package chaos/checker) reads afterwards.
//
// It fences itself as a real broker should: before EVERY write it checks the
// lease file that the supervisor keeps current (NODE_LEASE_FILE) and stops
// with exit code 3 as soon as the lease is not valid. It never asks S3.
//
// Environment, besides what nodeid-init sets:
//
//	CHAOS_EVENT_LOG       event log (JSON lines), required
//	CHAOS_WRITE_INTERVAL  pause between writes (default 20ms)
//	CHAOS_MAX_RUN         stop by itself after this long (default 3m)
//
// SIGTERM stops it cleanly (exit 0), as a broker drains on a deploy.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/nodeid/nodeid/chaos/checker"
	"github.com/nodeid/nodeid/clock"
	"github.com/nodeid/nodeid/leasefile"
)

// Exit codes.
const (
	exitOK        = 0
	exitError     = 1
	exitLeaseLost = 3 // the lease file said stop
)

func main() { os.Exit(run()) }

func run() int {
	b, err := newBroker()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testbroker: %v\n", err)
		return exitError
	}
	defer b.close()
	return b.loop()
}

type broker struct {
	node     int
	version  int64
	task     string
	lease    string
	interval time.Duration
	maxRun   time.Duration
	data     *os.File
	events   *os.File
	seq      int64
}

func newBroker() (*broker, error) {
	b := &broker{task: os.Getenv("NODE_TASK_ID"), lease: os.Getenv("NODE_LEASE_FILE"),
		interval: 20 * time.Millisecond, maxRun: 3 * time.Minute}
	var err error
	if b.node, err = strconv.Atoi(os.Getenv("NODE_ID")); err != nil {
		return nil, fmt.Errorf("NODE_ID: %w", err)
	}
	if b.version, err = strconv.ParseInt(os.Getenv("NODE_VERSION"), 10, 64); err != nil {
		return nil, fmt.Errorf("NODE_VERSION: %w", err)
	}
	if b.lease == "" {
		return nil, fmt.Errorf("NODE_LEASE_FILE is not set: cannot fence writes")
	}
	if v := os.Getenv("CHAOS_WRITE_INTERVAL"); v != "" {
		if b.interval, err = time.ParseDuration(v); err != nil {
			return nil, fmt.Errorf("CHAOS_WRITE_INTERVAL: %w", err)
		}
	}
	if v := os.Getenv("CHAOS_MAX_RUN"); v != "" {
		if b.maxRun, err = time.ParseDuration(v); err != nil {
			return nil, fmt.Errorf("CHAOS_MAX_RUN: %w", err)
		}
	}
	dir := os.Getenv("NODE_DATA_DIR")
	if dir == "" {
		return nil, fmt.Errorf("NODE_DATA_DIR is not set")
	}
	logPath := os.Getenv("CHAOS_EVENT_LOG")
	if logPath == "" {
		return nil, fmt.Errorf("CHAOS_EVENT_LOG is not set")
	}
	if b.events, err = os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); err != nil {
		return nil, fmt.Errorf("event log: %w", err)
	}
	// Our own segment: files of earlier versions may be hard links shared
	// with the predecessor's directory and are never written.
	if b.data, err = os.OpenFile(filepath.Join(dir, checker.RecordFile(b.version)), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); err != nil {
		b.events.Close()
		return nil, fmt.Errorf("data file: %w", err)
	}
	return b, nil
}

func (b *broker) close() {
	b.data.Close()
	b.events.Close()
}

func (b *broker) event(e checker.Event) {
	e.Node, e.Version, e.Task = b.node, b.version, b.task
	line, _ := json.Marshal(e)
	// One write(2) of a whole line to an O_APPEND file: lines never
	// interleave, and a kill leaves at most the last one torn.
	b.events.Write(append(line, '\n'))
}

func (b *broker) loop() int {
	b.event(checker.Event{Kind: checker.KindStart, Mono: int64(clock.SystemBoottime()),
		Graceful: os.Getenv("NODE_PREVIOUS_GRACEFUL") == "true", PID: os.Getpid()})
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	stop := time.After(b.maxRun)
	tick := time.NewTicker(b.interval)
	defer tick.Stop()
	for {
		select {
		case <-term:
			b.event(checker.Event{Kind: checker.KindStop, Mono: int64(clock.SystemBoottime()), Reason: "sigterm"})
			return exitOK
		case <-stop:
			b.event(checker.Event{Kind: checker.KindStop, Mono: int64(clock.SystemBoottime()), Reason: "max run"})
			return exitOK
		case <-tick.C:
		}
		if code, ok := b.write(); !ok {
			return code
		}
	}
}

// write checks the lease, then appends one record. The check comes
// immediately before the write so that nothing but a preemption can come
// between them; the design's margin m covers that.
func (b *broker) write() (int, bool) {
	begin := clock.SystemBoottime()
	l, err := leasefile.Check(b.lease)
	if err != nil {
		b.event(checker.Event{Kind: checker.KindStop, Mono: int64(clock.SystemBoottime()), Reason: "lease not valid: " + err.Error()})
		return exitLeaseLost, false
	}
	if l.NodeID != b.node || l.Version != b.version {
		b.event(checker.Event{Kind: checker.KindStop, Mono: int64(clock.SystemBoottime()),
			Reason: fmt.Sprintf("lease file names node %d v%d", l.NodeID, l.Version)})
		return exitLeaseLost, false
	}
	b.seq++
	// The record carries its evidence itself: if the broker dies before its
	// event, the checker still judges the record against the tenure.
	rec, _ := json.Marshal(checker.Record{Node: b.node, Version: b.version, Task: b.task, Seq: b.seq,
		Begin: int64(begin), ValidUntil: l.ValidUntilBoottimeNs})
	if _, err := b.data.Write(append(rec, '\n')); err != nil {
		b.event(checker.Event{Kind: checker.KindStop, Mono: int64(clock.SystemBoottime()), Reason: "write: " + err.Error()})
		return exitError, false
	}
	b.event(checker.Event{Kind: checker.KindWrite, Seq: b.seq, Begin: int64(begin),
		Mono: int64(clock.SystemBoottime()), ValidUntil: l.ValidUntilBoottimeNs})
	return 0, true
}
