package datadir

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodeid/nodeid/nodeid"
)

// Two tasks that believe they hold the same version K (the case
// ErrVersionUsed exists for) must not both proceed. These tests play them
// against each other, pausing one inside Prepare.

// pauseAt is a slog.Handler that calls on(msg) synchronously when a record
// with that message is logged: a way to pause Prepare at a line that logs.
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

// A is in flight (its in-progress file written, copying); B, another holder
// of the same version, judges A's directory. The in-progress file cannot
// tell a live preparation from a crashed one, so B refuses unless it names
// B's own tenure, and A's directory is untouched. Before tenures, B removed
// A's directory (complete by then, its broker writing) and both proceeded
// (found by review).
func TestSameVersionInFlightIsRefused(t *testing.T) {
	for _, tenureB := range []string{"task-b", ""} {
		t.Run("B's tenure "+tenureB, func(t *testing.T) {
			root := t.TempDir()
			claimRoot(t, root, clusterA)
			mustPrepare(t, root, inst(0, 1), Options{Cluster: clusterA})
			writeFiles(t, Dir(root, inst(0, 1)), map[string]string{"log/segment-1": "data of v1"})

			aInFlight, aGo := make(chan struct{}), make(chan struct{})
			a := goPrepare(root, inst(0, 2), Options{Cluster: clusterA, Tenure: "task-a", Logger: slog.New(&pauseAt{
				msg: "preparing from previous version",
				on:  func() { close(aInFlight); <-aGo },
			})})
			waitOr(t, aInFlight, "A in flight")
			before := snapshotTree(t, root)
			_, _, errB := Prepare(context.Background(), root, inst(0, 2), Options{Cluster: clusterA, Tenure: tenureB, Logger: quiet})
			if !errors.Is(errB, ErrVersionUsed) {
				t.Errorf("B: err = %v, want ErrVersionUsed", errB)
			}
			equalMaps(t, snapshotTree(t, root), before)
			close(aGo)
			ra := <-a
			if ra.err != nil {
				t.Fatalf("A: %v", ra.err)
			}
			equalMaps(t, contents(t, ra.dir), map[string]string{"log/segment-1": "data of v1"})
		})
	}
}

// A leftover naming another tenure, or none (an earlier release's), or
// ours when we have none, may be another holder's preparation in flight:
// refused and left in place. Below a later version its tenure is over, and
// GC removes it as before.
func TestLeftoverOfAnotherTenureIsRefused(t *testing.T) {
	for _, tc := range []struct{ name, file, ours string }{
		{"another tenure", "task-a", "task-b"},
		{"no tenure in the file", "", "task-b"},
		{"no tenure of ours", "task-a", ""},
		{"neither has one", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			makeVersion(t, root, 0, 1, map[string]string{"a": "alpha"}, 1)
			target := makeVersion(t, root, 0, 2, map[string]string{"a": "half"}, -1)
			writePreparingTenure(t, target, 2, clusterA, tc.file)
			claimRoot(t, root, clusterA)
			before := snapshotTree(t, root)
			_, _, err := Prepare(context.Background(), root, inst(0, 2), Options{Cluster: clusterA, Tenure: tc.ours, Logger: quiet})
			if !errors.Is(err, ErrVersionUsed) {
				t.Fatalf("err = %v, want ErrVersionUsed", err)
			}
			equalMaps(t, snapshotTree(t, root), before)
			_, res := mustPrepare(t, root, inst(0, 3), Options{Cluster: clusterA, Tenure: "task-c"})
			if res.Source != 1 || exists(t, target) {
				t.Errorf("v3: source v%d, v2 exists = %v; want v1 and v2 collected", res.Source, exists(t, target))
			}
		})
	}
}

// An empty target (a crash right after mkdir) or one holding only an empty
// in-progress file (a crash before it was written) is redone without a
// tenure: it holds nothing. Another holder of the version may be at that
// very point, but rmdir(2) removes only an empty directory, atomically
// against a create in it, and a create in a removed directory fails: so
// whoever removes it goes on and the other refuses, with ErrVersionUsed.
func TestEmptyTargetAtMostOnePreparerProceeds(t *testing.T) {
	files := map[string]string{"log/segment-1": "data of v1"}
	t.Run("ours removed after mkdir", func(t *testing.T) {
		root := t.TempDir()
		makeVersion(t, root, 0, 1, files, 1)
		aMade, aGo := make(chan struct{}), make(chan struct{})
		var once atomic.Bool
		setHook(t, &testHookAfterMkdir, func(string) {
			if once.CompareAndSwap(false, true) {
				close(aMade)
				<-aGo
			}
		})
		a := goPrepare(root, inst(0, 2), Options{Tenure: "task-a", Logger: quiet})
		waitOr(t, aMade, "A's mkdir")
		dirB, resB := mustPrepare(t, root, inst(0, 2), Options{Tenure: "task-b"})
		close(aGo)
		if ra := <-a; !errors.Is(ra.err, ErrVersionUsed) {
			t.Errorf("A: err = %v, want ErrVersionUsed", ra.err)
		}
		if !resB.Redone {
			t.Error("B: Redone = false")
		}
		equalMaps(t, contents(t, dirB), files)
		if m := readMarkerFile(t, dirB); m["version"] != float64(2) {
			t.Errorf("B's marker = %v", m)
		}
	})
	t.Run("judged empty, prepared meanwhile", func(t *testing.T) {
		root := t.TempDir()
		makeVersion(t, root, 0, 1, files, 1)
		makeVersion(t, root, 0, 2, nil, -1)
		bJudged, bGo := make(chan struct{}), make(chan struct{})
		b := goPrepare(root, inst(0, 2), Options{Tenure: "task-b", Logger: slog.New(&pauseAt{
			msg: "removing leftovers of an interrupted preparation",
			on:  func() { close(bJudged); <-bGo },
		})})
		waitOr(t, bJudged, "B's judgement")
		dirA, _ := mustPrepare(t, root, inst(0, 2), Options{Tenure: "task-a"})
		close(bGo)
		if rb := <-b; !errors.Is(rb.err, ErrVersionUsed) {
			t.Errorf("B: err = %v, want ErrVersionUsed", rb.err)
		}
		equalMaps(t, contents(t, dirA), files)
	})
	t.Run("only an empty in-progress file, written meanwhile", func(t *testing.T) {
		root := t.TempDir()
		makeVersion(t, root, 0, 1, files, 1)
		target := makeVersion(t, root, 0, 2, map[string]string{PreparingName: ""}, -1)
		bJudged, bGo := make(chan struct{}), make(chan struct{})
		b := goPrepare(root, inst(0, 2), Options{Tenure: "task-b", Logger: slog.New(&pauseAt{
			msg: "removing leftovers of an interrupted preparation",
			on:  func() { close(bJudged); <-bGo },
		})})
		waitOr(t, bJudged, "B's judgement")
		// A, between creating its in-progress file and writing it, goes on.
		f, err := os.OpenFile(filepath.Join(target, PreparingName), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(`{"version":2,"bucket":"","prefix":"","tenure":"task-a"}`); err != nil {
			t.Fatal(err)
		}
		f.Close()
		writeFiles(t, target, map[string]string{"log/segment-1": "A's copy"})
		close(bGo)
		if rb := <-b; !errors.Is(rb.err, ErrVersionUsed) {
			t.Errorf("B: err = %v, want ErrVersionUsed", rb.err)
		}
		if !exists(t, filepath.Join(target, "log/segment-1")) {
			t.Error("B removed what A wrote")
		}
	})
}

// The target appears, prepared by another task holding the same version,
// between the judgement and the mkdir: a typed refusal (ErrVersionUsed), so
// that nodeid-init exits 6 and leaves the lease to expire rather than
// releasing it as graceful (found by review).
func TestTargetCreatedAfterJudgementIsVersionUsed(t *testing.T) {
	root := t.TempDir()
	// An unowned root, so that B logs its claim between judgement and mkdir.
	makeVersion(t, root, 0, 1, map[string]string{"log/segment-1": "data of v1"}, 1)

	var ra prepResult
	b := goPrepare(root, inst(0, 2), Options{Cluster: clusterA, Logger: slog.New(&pauseAt{
		msg: "data root claimed for this cluster",
		on: func() {
			dir, res, err := Prepare(context.Background(), root, inst(0, 2), Options{Cluster: clusterA, Logger: quiet})
			ra = prepResult{dir, res, err}
		},
	})})
	rb := <-b
	if ra.err != nil {
		t.Fatalf("A: %v", ra.err)
	}
	if !errors.Is(rb.err, ErrVersionUsed) {
		t.Fatalf("B: err = %v; want ErrVersionUsed, the target is A's valid directory", rb.err)
	}
	if m := readMarkerFile(t, ra.dir); m["version"] != float64(2) {
		t.Errorf("A's marker = %v", m)
	}
}

// Once Prepare has created its target, any sign that another holder of the
// version has it (its in-progress file, a marker, our in-progress file
// gone or replaced) makes a failure a typed refusal, ErrVersionUsed: an
// untyped error would make nodeid-init release the lease as graceful, and
// the next holder hard-link the winner's files (found by review). A failure
// without such a sign stays an ordinary error.
func TestAnotherHolderInOurNewTargetIsVersionUsed(t *testing.T) {
	files := map[string]string{"log/segment-1": "data of v1"}
	planted := func(t *testing.T, dir string) { writeFiles(t, dir, map[string]string{"log/segment-1": "planted"}) }
	for _, tc := range []struct {
		name  string
		hook  *func(string)
		do    func(t *testing.T, dir string)
		typed bool
	}{
		{"its in-progress file created before ours", &testHookAfterMkdir, func(t *testing.T, dir string) {
			writePreparingTenure(t, dir, 2, clusterA, "task-b")
		}, true},
		{"ours unlinked by its redo before the fstatat (SettleTime)", &testHookAfterCreateIP, func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, PreparingName)); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"ours replaced by its own, then the copy fails", &testHookFile, func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, PreparingName)); err != nil {
				t.Fatal(err)
			}
			writePreparingTenure(t, dir, 2, clusterA, "task-b")
			planted(t, dir)
		}, true},
		{"its marker, then the copy fails", &testHookFile, func(t *testing.T, dir string) {
			writeFiles(t, dir, map[string]string{MarkerName: camundaMarker(2, ver(1))})
			planted(t, dir)
		}, true},
		{"no sign of it, the copy fails", &testHookFile, planted, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			claimRoot(t, root, clusterA)
			makeVersion(t, root, 0, 1, files, 1)
			dir := Dir(root, inst(0, 2))
			var once atomic.Bool
			setHook(t, tc.hook, func(string) {
				if once.CompareAndSwap(false, true) {
					tc.do(t, dir)
				}
			})
			_, _, err := Prepare(context.Background(), root, inst(0, 2), Options{Cluster: clusterA, Tenure: "task-a", SettleTime: time.Minute, Logger: quiet})
			if err == nil {
				t.Fatal("Prepare succeeded")
			}
			if got := errors.Is(err, ErrVersionUsed); got != tc.typed {
				t.Errorf("err = %v; ErrVersionUsed = %v, want %v", err, got, tc.typed)
			}
			// A failed target is removed only if it is positively ours,
			// never once another holder has it.
			if tc.typed && !exists(t, dir) {
				t.Error("another holder's target was removed")
			}
			if !tc.typed && exists(t, dir) {
				t.Error("our failed target stayed")
			}
		})
	}
}
