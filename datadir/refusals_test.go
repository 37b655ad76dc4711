//go:build unix

package datadir

// Direct tests of refusals that the rest of the suite only reached by
// chance (issue 28: each survived a mutation of its check). make mutants
// (mutants/mutants.txt) breaks each check and runs them.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Preparing a version that is already initialized is refused before
// anything is written: not even our leftovers below it are removed (the
// refusal comes from the plan, not from the mkdir that would fail later).
func TestPreparingAnInitializedVersionWritesNothing(t *testing.T) {
	root := t.TempDir()
	mustPrepare(t, root, inst(0, 1), Options{Tenure: "task-1"}) // the root is this cluster's
	leftover := makeVersion(t, root, 0, 2, map[string]string{"half": "copied"}, -1)
	writePreparingTenure(t, leftover, 2, Cluster{}, "task-2")
	dir := makeVersion(t, root, 0, 3, map[string]string{"mine": "data"}, 3)
	_, _, err := Prepare(context.Background(), root, inst(0, 3), Options{Logger: quiet, Tenure: "task-3"})
	if !errors.Is(err, ErrVersionUsed) {
		t.Fatalf("err = %v, want ErrVersionUsed", err)
	}
	if !exists(t, leftover) {
		t.Errorf("%s (a leftover below the refused version) was removed before the refusal", leftover)
	}
	equalMaps(t, contents(t, dir), map[string]string{"mine": "data"})
}

// A later tenure's cleanup that judged our target a leftover (our lease is
// over) and unlinked its in-progress file owns its removal: Prepare must
// not report the directory ready, nor leave its marker in place.
func TestCompletionTakenForRemovalIsRefused(t *testing.T) {
	root := t.TempDir()
	makeVersion(t, root, 0, 1, map[string]string{"a": "1"}, 1)
	setHook(t, &testHookAfterMarker, func(dir string) {
		if err := os.Remove(filepath.Join(dir, PreparingName)); err != nil {
			t.Error(err)
		}
	})
	dir, _, err := Prepare(context.Background(), root, inst(0, 2), Options{Logger: quiet, Tenure: "task-2"})
	if !errors.Is(err, ErrVersionUsed) {
		t.Fatalf("Prepare = %q, %v; want ErrVersionUsed", dir, err)
	}
	if target := Dir(root, inst(0, 2)); exists(t, filepath.Join(target, MarkerName)) {
		t.Errorf("a marker is in place over %s, which a later tenure is removing", target)
	}
}

// After an ungraceful takeover a file judged linkable (one name, settled)
// that a stale holder changes before the link lands, so that the stamp
// taken right after the link already shows the change, is caught by
// validation: by its new name (nlink), or by its mtime within SettleTime.
func TestLinkableFileChangedBeforeItsLinkFailsValidation(t *testing.T) {
	const settle = 100 * time.Millisecond
	rel := "snapshots/1/000042.sst"
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, root, file string)
	}{
		{"a second name", func(t *testing.T, root, file string) {
			if err := os.Link(file, filepath.Join(root, "stale-holders-name")); err != nil {
				t.Error(err)
			}
		}},
		{"written within SettleTime", func(t *testing.T, _, file string) {
			if err := os.WriteFile(file, []byte("STALE!!!"), 0o644); err != nil {
				t.Error(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			src := makeVersion(t, root, 0, 4, map[string]string{rel: "snapshot"}, 4)
			time.Sleep(3 * settle) // settled: linkable after a crash
			var changed int
			setHook(t, &testHookBeforeLink, func(r string) {
				if r == rel {
					changed++
					tc.change(t, root, filepath.Join(src, rel))
				}
			})
			dir, _, err := Prepare(context.Background(), root, inst(0, 5),
				Options{Logger: quiet, Rules: zeebe(t), SettleTime: settle, Tenure: "task-5"}) // ungraceful
			if changed != 1 {
				t.Fatalf("%s was linked %d times, want once (judged linkable)", rel, changed)
			}
			if !errors.Is(err, ErrValidation) {
				t.Fatalf("Prepare = %q, %v; want ErrValidation", dir, err)
			}
		})
	}
}
