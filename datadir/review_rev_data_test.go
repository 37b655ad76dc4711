package datadir

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodeid/nodeid/nodeid"
)

// pauseAt is a slog.Handler that calls on(msg) synchronously when a record
// with that message is logged: a way to pause Prepare at a line that logs,
// through its public Options only.
type pauseAt struct {
	msg string
	on  func()
}

func (p *pauseAt) Enabled(context.Context, slog.Level) bool { return true }
func (p *pauseAt) Handle(_ context.Context, r slog.Record) error {
	if r.Message == p.msg && p.on != nil {
		f := p.on
		p.on = nil // once
		f()
	}
	return nil
}
func (p *pauseAt) WithAttrs([]slog.Attr) slog.Handler { return p }
func (p *pauseAt) WithGroup(string) slog.Handler      { return p }

type prepResult struct {
	dir string
	res Result
	err error
}

func goPrepare(root string, in nodeid.NodeInstance, opts Options) <-chan prepResult {
	ch := make(chan prepResult, 1)
	go func() {
		dir, res, err := Prepare(context.Background(), root, in, opts)
		ch <- prepResult{dir, res, err}
	}()
	return ch
}

func waitOr(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(20 * time.Second):
		t.Fatalf("timeout waiting for %s", what)
	}
}

// Invariant 3: two tasks that believe they hold the same version K (the case
// ErrVersionUsed exists for) must not both proceed. Schedule:
//
//	A: Prepare(K) ... writes vK/.nodeid-preparing, starts the copy   (paused)
//	B: Prepare(K): inspect vK -> "our leftover" (in-progress file names K and
//	   our cluster), decides to remove and redo it                     (paused)
//	A: finishes: marker, unlinks the in-progress file, returns the dir; its
//	   broker starts writing there
//	B: removes vK -- A's complete, valid, in-use directory -- recreates it,
//	   and returns success too.
//
// Both return the same path; A's valid directory and the data A's broker
// wrote are deleted by B. B should have refused (ErrVersionUsed): the
// in-progress file cannot tell a crashed preparation of ours from a live one
// of someone else holding the same version.
func TestRevSameVersionInFlightIsDeletedAndBothProceed(t *testing.T) {
	root := t.TempDir()
	mustPrepare(t, root, inst(0, 1), Options{Cluster: clusterA})
	writeFiles(t, Dir(root, inst(0, 1)), map[string]string{"log/segment-1": "data of v1"})

	aInFlight, aGo := make(chan struct{}), make(chan struct{})
	a := goPrepare(root, inst(0, 2), Options{Cluster: clusterA, Logger: slog.New(&pauseAt{
		msg: "datadir: preparing from previous version",
		on:  func() { close(aInFlight); <-aGo },
	})})
	waitOr(t, aInFlight, "A in flight")

	bJudged, bGo := make(chan struct{}), make(chan struct{})
	b := goPrepare(root, inst(0, 2), Options{Cluster: clusterA, Logger: slog.New(&pauseAt{
		msg: "datadir: removing leftovers of an interrupted preparation",
		on:  func() { close(bJudged); <-bGo },
	})})
	select {
	case <-bJudged:
	case r := <-b:
		close(aGo)
		<-a
		t.Fatalf("B refused before touching A's directory (good): %v", r.err)
	case <-time.After(20 * time.Second):
		t.Fatal("timeout")
	}

	close(aGo)
	ra := <-a
	if ra.err != nil {
		t.Fatalf("A: %v", ra.err)
	}
	// A's broker starts and writes into its directory.
	writeFiles(t, ra.dir, map[string]string{"log/segment-2": "written by A's broker"})
	markerA, err := os.ReadFile(filepath.Join(ra.dir, MarkerName))
	if err != nil {
		t.Fatal(err)
	}

	close(bGo)
	rb := <-b
	t.Logf("A: dir=%s err=%v; B: dir=%s err=%v redone=%v", ra.dir, ra.err, rb.dir, rb.err, rb.res.Redone)
	if rb.err == nil {
		t.Errorf("both tasks holding version 2 proceeded into %s (B: Redone=%v); want B to refuse with ErrVersionUsed", rb.dir, rb.res.Redone)
	} else if !errors.Is(rb.err, ErrVersionUsed) {
		t.Errorf("B: err = %v, want ErrVersionUsed", rb.err)
	}
	if !exists(t, filepath.Join(ra.dir, "log/segment-2")) {
		t.Errorf("data A's broker wrote into its valid directory was deleted by B")
	}
	if m, _ := os.ReadFile(filepath.Join(ra.dir, MarkerName)); string(m) != string(markerA) {
		t.Errorf("A's marker %s was replaced by %s: A's complete directory was removed and prepared again", markerA, m)
	}
}
