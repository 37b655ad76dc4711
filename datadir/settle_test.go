package datadir

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A stale holder still writing a snapshot file (receiving it chunk by
// chunk) when it loses its lease: the file has one name, so the nlink rule
// lets it through. With SettleTime the file, written recently, is copied,
// and the stale holder's later writes stay in its own directory (found by
// review).
func TestRecentlyWrittenSnapshotFileIsCopiedAfterACrash(t *testing.T) {
	root := t.TempDir()
	src := makeVersion(t, root, 0, 4, map[string]string{"log/segment": "journal"}, 4)
	rel := "snapshots/5-1-7-7-1/000051.sst"
	pending := filepath.Join(src, rel)
	if err := os.MkdirAll(filepath.Dir(pending), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(pending, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("chunk 1;"); err != nil {
		t.Fatal(err)
	}

	dir, res := mustPrepare(t, root, inst(0, 5), Options{Rules: zeebe(t), SettleTime: time.Minute}) // ungraceful
	if sameInode(t, src, dir, rel) || res.FilesLinked != 0 {
		t.Fatalf("%s, written just now, was hard-linked after a crash (filesLinked=%d)", rel, res.FilesLinked)
	}
	if _, err := f.WriteString("chunk 2 from the stale holder"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, rel)); err != nil || string(b) != "chunk 1;" {
		t.Errorf("successor's %s = %q, %v; want the copy %q, untouched by the stale holder", rel, b, err, "chunk 1;")
	}
}

// SettleTime only holds back what changed recently: a snapshot file whose
// mtime and ctime are both older than Prepare's start minus SettleTime is
// still linked. ctime cannot be set, so the files are written, then the test
// waits longer than SettleTime.
func TestSettleTime(t *testing.T) {
	const settle = 100 * time.Millisecond
	for _, tc := range []struct {
		name   string
		touch  func(t *testing.T, file string) // after the wait
		linked bool
	}{
		{"settled", func(*testing.T, string) {}, true},
		{"mtime set back, ctime recent", func(t *testing.T, file string) {
			old := time.Now().Add(-time.Hour)
			if err := os.Chtimes(file, old, old); err != nil { // moves ctime to now
				t.Fatal(err)
			}
		}, false},
		{"written recently", func(t *testing.T, file string) {
			writeFiles(t, filepath.Dir(file), map[string]string{filepath.Base(file): "rewritten"})
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			rel := "snapshots/1/000042.sst"
			src := makeVersion(t, root, 0, 4, map[string]string{rel: "snapshot"}, 4)
			time.Sleep(3 * settle)
			tc.touch(t, filepath.Join(src, rel))
			dir, _ := mustPrepare(t, root, inst(0, 5), Options{Rules: zeebe(t), SettleTime: settle})
			if got := sameInode(t, src, dir, rel); got != tc.linked {
				t.Errorf("hard-linked = %v, want %v", got, tc.linked)
			}
		})
	}
}

// A settled file is linked; one written through the stale holder's open
// descriptor after that, during the copy, fails validation: its mtime moved
// past the cutoff (our link moves only the ctime).
func TestSettledFileWrittenAfterItWasLinkedFailsValidation(t *testing.T) {
	const settle = 100 * time.Millisecond
	root := t.TempDir()
	rel := "snapshots/1/000042.sst"
	src := makeVersion(t, root, 0, 4, map[string]string{rel: "snapshot"}, 4)
	f, err := os.OpenFile(filepath.Join(src, rel), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	time.Sleep(3 * settle)
	setHook(t, &testHookBeforeValidate, func(string) {
		if _, err := f.WriteString(" and more"); err != nil {
			t.Error(err)
		}
	})
	_, _, err = Prepare(context.Background(), root, inst(0, 5), Options{Rules: zeebe(t), SettleTime: settle, Logger: quiet})
	if !errors.Is(err, ErrValidation) {
		t.Fatalf("err = %v, want ErrValidation", err)
	}
}

// A settled file is linked; during the copy the stale holder writes it
// through the descriptor it still holds and sets its mtime back (as touch
// -r, cp -p or tar do). The mtime check alone passes that; the ctime, size
// and mtime recorded right after our linkat do not, with SettleTime or
// without (found by review).
func TestLinkedFileWrittenThenMtimeSetBackFailsValidation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		settle time.Duration
		write  func(f *os.File) error
	}{
		{"appended", 100 * time.Millisecond, func(f *os.File) error {
			_, err := f.Write([]byte(" + stale write"))
			return err
		}},
		{"overwritten with the same size", 100 * time.Millisecond, func(f *os.File) error {
			_, err := f.WriteAt([]byte("STALE!!!"), 0)
			return err
		}},
		{"overwritten with the same size, no SettleTime", 0, func(f *os.File) error {
			_, err := f.WriteAt([]byte("STALE!!!"), 0)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			rel := "snapshots/1/000042.sst"
			src := makeVersion(t, root, 0, 4, map[string]string{rel: "snapshot"}, 4)
			file := filepath.Join(src, rel)
			f, err := os.OpenFile(file, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			time.Sleep(3 * tc.settle)
			fi, err := os.Stat(file)
			if err != nil {
				t.Fatal(err)
			}
			old := fi.ModTime()
			setHook(t, &testHookBeforeValidate, func(string) {
				// Past the file system's timestamp granularity, so the
				// write moves the ctime (see docs/datadir.md).
				time.Sleep(20 * time.Millisecond)
				if err := tc.write(f); err != nil {
					t.Error(err)
				}
				if err := os.Chtimes(file, old, old); err != nil {
					t.Error(err)
				}
			})
			dir, _, err := Prepare(context.Background(), root, inst(0, 5), Options{Rules: zeebe(t), SettleTime: tc.settle, Logger: quiet})
			if !errors.Is(err, ErrValidation) {
				b, _ := os.ReadFile(filepath.Join(dir, rel))
				t.Fatalf("err = %v, want ErrValidation (v5's %s, linked: %v, holds %q)", err, rel, dir != "" && sameInode(t, src, dir, rel), b)
			}
			if exists(t, filepath.Join(Dir(root, inst(0, 5)), MarkerName)) {
				t.Error("v5 got a marker")
			}
		})
	}
}

func TestNegativeSettleTimeIsInvalid(t *testing.T) {
	if _, _, err := Prepare(context.Background(), t.TempDir(), inst(0, 1), Options{SettleTime: -time.Second, Logger: quiet}); !errors.Is(err, ErrInvalid) {
		t.Errorf("err = %v, want ErrInvalid", err)
	}
}
