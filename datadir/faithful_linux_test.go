package datadir

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Issue 24: a copy as faithful as cp -a, and as current as validation can
// prove.

// A stale holder writes a copied (not linked) file in place after its copy,
// before validation, keeping its size: as Zeebe writes its preallocated
// journal segments. Validation used to compare only sizes for copies, so
// the copy of the old content got a marker (issue 24.2).
func TestCopiedFileWrittenInPlaceBeforeValidationFails(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mtime   bool // set the mtime back after the write
		replace bool // rename a same-size file over the name instead
	}{
		{"same-size write", false, false},
		{"same-size write, mtime set back", true, false},
		{"replaced by a same-size file, mtime set back", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			rel := "raft-partition/partitions/1/journal-1.log"
			src := makeVersion(t, root, 0, 4, map[string]string{rel: "preallocated segment", "other": "x"}, 4)
			file := filepath.Join(src, rel)
			fi, err := os.Stat(file)
			if err != nil {
				t.Fatal(err)
			}
			hooked := false
			setHook(t, &testHookBeforeValidate, func(string) {
				hooked = true
				time.Sleep(20 * time.Millisecond) // past the time stamp granularity
				if tc.replace {
					tmp := filepath.Join(src, "tmp")
					if err := os.WriteFile(tmp, []byte("STALE!!!ALLOCATED!!!"), 0o644); err != nil {
						t.Error(err)
					}
					if err := os.Chtimes(tmp, fi.ModTime(), fi.ModTime()); err != nil {
						t.Error(err)
					}
					if err := os.Rename(tmp, file); err != nil {
						t.Error(err)
					}
					return
				}
				f, err := os.OpenFile(file, os.O_WRONLY, 0)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := f.WriteAt([]byte("STALE!!!"), 0); err != nil {
					t.Error(err)
				}
				f.Close()
				if tc.mtime {
					if err := os.Chtimes(file, fi.ModTime(), fi.ModTime()); err != nil {
						t.Error(err)
					}
				}
			})
			dir, _, err := Prepare(context.Background(), root, inst(0, 5), Options{Logger: quiet})
			if !hooked {
				t.Fatal("hook never ran")
			}
			if !errors.Is(err, ErrValidation) {
				b, _ := os.ReadFile(filepath.Join(dir, rel))
				t.Fatalf("err = %v, want ErrValidation: v5's copy holds %q, the source %q", err, b, mustRead(t, file))
			}
			if exists(t, filepath.Join(Dir(root, inst(0, 5)), MarkerName)) {
				t.Error("v5 got a marker")
			}
		})
	}
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
