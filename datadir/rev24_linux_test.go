package datadir

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Review r24, invariant 5 (nothing under the data root trusted) and the
// documented rule that every entry of the target must be one Prepare made
// (docs/datadir.md, Symlinks and Validation): validateList accepts any
// target name that the source holds, and validateEntry returns nil for a
// source entry that is skipped (Skip, Rules.SkipSegment) or special (FIFO,
// socket, device) when nothing was made for it, without looking at the
// target. So an entry planted in the target under such a name passes.
//
// Schedule: v1 holds runtime/ (skipped by the pattern or the zeebe preset)
// or a FIFO. Prepare of v2 copies, leaving them out. Before validation a
// tenant with our uid plants runtime -> /outside (or fifo -> /outside) in
// v2. Validation, the recheck and the marker pass: v2 is valid with a
// symlink out of the data root that Prepare did not make, where the broker
// writes its runtime state. Want ErrValidation, no marker.

func TestRev24PlantedSymlinkUnderASkippedNameFailsValidation(t *testing.T) {
	outside := t.TempDir()
	for _, tc := range []struct {
		name  string
		opts  Options
		setup func(t *testing.T, src string)
		plant string
	}{
		{"skip pattern", Options{Skip: []string{"runtime/**"}}, func(t *testing.T, src string) {
			writeFiles(t, src, map[string]string{"runtime/db": "rocks"})
		}, "runtime"},
		{"zeebe preset", Options{Rules: must(Preset("zeebe"))}, func(t *testing.T, src string) {
			writeFiles(t, src, map[string]string{"p/1/runtime/db": "rocks"})
		}, "p/1/runtime"},
		{"special file", Options{}, func(t *testing.T, src string) {
			if err := syscall.Mkfifo(filepath.Join(src, "fifo"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "fifo"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A tenant with our uid plants a symlink out of the data root
			// in the target, under the name the source holds but the copy
			// leaves out: before validation, or after it (the recheck
			// before the marker is put in place).
			for _, when := range []struct {
				name string
				hook *func(string)
			}{{"before validation", &testHookBeforeValidate}, {"after validation", &testHookAfterMarker}} {
				t.Run(when.name, func(t *testing.T) {
					root := t.TempDir()
					src := makeVersion(t, root, 0, 1, map[string]string{"a": "alpha", "p/1/x": "x"}, 1)
					tc.setup(t, src)
					setHook(t, when.hook, func(dir string) {
						if err := os.Symlink(outside, filepath.Join(dir, tc.plant)); err != nil {
							t.Error(err)
						}
					})
					opts := tc.opts
					opts.Logger = quiet
					dir, _, err := Prepare(context.Background(), root, inst(0, 2), opts)
					if err == nil {
						got, _ := os.Readlink(filepath.Join(dir, tc.plant))
						t.Errorf("Prepare succeeded with %s -> %q in v2, an entry it did not make (a symlink out of the data root); want ErrValidation", tc.plant, got)
					} else if !errors.Is(err, ErrValidation) {
						t.Errorf("Prepare: %v; want ErrValidation", err)
					} else if when.hook == &testHookBeforeValidate && !strings.Contains(err.Error(), "in the target, but not made by this preparation") {
						// Caught by validation itself, not only by the
						// recheck after the flush.
						t.Errorf("Prepare: %v; want validation to refuse the planted entry", err)
					}
					if _, err := os.Stat(filepath.Join(dir, MarkerName)); err == nil {
						t.Errorf("v2 has a marker after a failed validation")
					}
				})
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
