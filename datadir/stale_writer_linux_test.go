package datadir

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A stale holder still works in its version while its successor prepares
// from it: it writes, renames, deletes and swaps entries of the source. Each
// such change must fail the preparation or stay out of the successor.

// Review rev18, break 1 (invariant 3: a stale holder's write through a hard
// link reaches the successor, and validation does not see it).
//
// docs/datadir.md: "after any ungraceful takeover ... Prepare records each
// linked file's ctime, size and mtime right after its linkat; validation
// fails if any of them changed". validateEntry only looks at the record in
// the actLink branch, and it leaves that branch when the source *name* no
// longer is the linked inode and the new inode is not shareable (recent
// ctime, or a second name): then it is judged as a copy (not the same
// inode as the source, same size) and passes.
//
// Schedule (ungraceful takeover, zeebe preset): v4/snapshots/1/000042.sst
// is settled and has one name; the stale holder of v4 holds it open. v5's
// Prepare links it (inode I) and records its stamp. Before validation the
// stale holder (1) writes "STALE!!!" over I through its descriptor (size
// unchanged) and (2) renames a fresh same-size file over the source name
// (as tar -x or an atomic rewrite by temp file + rename does). Validation:
// source name -> new inode J (ctime recent, or 2 names), target -> I; not
// shareable -> actCopy; I != J and sizes equal -> OK. Marker written. v5
// holds inode I with the stale holder's write, I still open for writing by
// the stale holder.
func TestRev18LinkedFileReplacedByRenameEvadesTheStampCheck(t *testing.T) {
	for _, tc := range []struct {
		name       string
		settle     time.Duration
		secondName bool // the replacement has a second name (outside the version)
		unlinkOnly bool // no replacement: the source name is unlinked (validation never looks at it)
	}{
		{"SettleTime, replacement written recently", 100 * time.Millisecond, false, false},
		{"no SettleTime, replacement with a second name", 0, true, false},
		{"no SettleTime, source name unlinked", 0, false, true},
		{"SettleTime, source name unlinked", 100 * time.Millisecond, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			rel := "snapshots/1/000042.sst"
			src := makeVersion(t, root, 0, 4, map[string]string{rel: "snapshot"}, 4)
			file := filepath.Join(src, rel)
			stale, err := os.OpenFile(file, os.O_WRONLY, 0) // the stale holder's descriptor
			if err != nil {
				t.Fatal(err)
			}
			defer stale.Close()
			time.Sleep(3 * tc.settle)
			hooked := false
			setHook(t, &testHookBeforeValidate, func(string) {
				hooked = true
				time.Sleep(20 * time.Millisecond) // past the time stamp granularity
				if _, err := stale.WriteAt([]byte("STALE!!!"), 0); err != nil {
					t.Error(err)
				}
				if tc.unlinkOnly {
					// e.g. the stale broker deleting the old snapshot, as Zeebe does.
					if err := os.Remove(file); err != nil {
						t.Error(err)
					}
					return
				}
				tmp := filepath.Join(root, "tmp-000042.sst") // same file system, outside node-0
				if err := os.WriteFile(tmp, []byte("snapshot"), 0o644); err != nil {
					t.Error(err)
				}
				if tc.secondName {
					if err := os.Link(tmp, filepath.Join(root, "second-name")); err != nil {
						t.Error(err)
					}
				}
				if err := os.Rename(tmp, file); err != nil {
					t.Error(err)
				}
			})
			dir, _, err := Prepare(context.Background(), root, inst(0, 5),
				Options{Rules: zeebe(t), SettleTime: tc.settle, Logger: quiet, Workers: 4})
			if !hooked {
				t.Fatal("hook never ran")
			}
			if errors.Is(err, ErrValidation) {
				return // the documented behaviour
			}
			if err != nil {
				t.Fatalf("Prepare: %v", err)
			}
			got, _ := os.ReadFile(filepath.Join(dir, rel))
			var sst, dst unix.Stat_t
			_ = unix.Fstat(int(stale.Fd()), &sst)
			_ = unix.Lstat(filepath.Join(dir, rel), &dst)
			t.Errorf("Prepare(v5) succeeded; v5/%s holds %q and is the inode the stale holder has open for writing: %v (ino %d / %d); "+
				"a write to the linked file after its linkat was not caught by validation",
				rel, got, sst.Ino == dst.Ino, sst.Ino, dst.Ino)
			// And the stale holder keeps writing into the successor's valid directory.
			if _, err := stale.WriteAt([]byte("LATER..."), 0); err != nil {
				t.Fatal(err)
			}
			got, _ = os.ReadFile(filepath.Join(dir, rel))
			t.Logf("after Prepare returned, the stale holder's next write: v5/%s = %q", rel, got)
		})
	}
}

// Review rev18, break 3 (docs: "special files (a FIFO) left out"; "Nothing
// under the data root is trusted"). The walk now takes types from getdents
// and, for a link (graceful, or an immutable name after a crash), never
// looks at the type again: linkat links whatever the name is at that
// moment. Validation lists again, sees a special file and skips it
// (actSpecial), so a FIFO (or, planted by root, a device node) swapped in
// between the listing and the linkat is carried into the successor as a
// hard link, and Prepare succeeds. The window is now the whole directory's
// listing-to-link time on up to Workers goroutines (it used to be an
// fstatat right before).
func TestRev18SpecialFileSwappedInAfterTheListingIsLinkedIntoTheTarget(t *testing.T) {
	for _, graceful := range []bool{true, false} {
		t.Run(map[bool]string{true: "graceful", false: "ungraceful, immutable name"}[graceful], func(t *testing.T) {
			root := t.TempDir()
			files := map[string]string{"snapshots/a": "alpha", "snapshots/b": "beta"}
			src := makeVersion(t, root, 0, 1, files, 1)
			swapped := false
			setHook(t, &testHookFile, func(rel string) {
				if rel != "snapshots/a" || swapped {
					return
				}
				swapped = true
				b := filepath.Join(src, "snapshots/b")
				if err := os.Remove(b); err != nil {
					t.Error(err)
				}
				if err := unix.Mkfifo(b, 0o644); err != nil {
					t.Error(err)
				}
			})
			dir, _, err := Prepare(context.Background(), root, inst(0, 2),
				Options{Rules: zeebe(t), PreviousGraceful: graceful, Logger: quiet, Workers: 1})
			if !swapped {
				t.Fatal("hook never ran")
			}
			if err != nil {
				return // refused: fine
			}
			fi, lerr := os.Lstat(filepath.Join(dir, "snapshots/b"))
			if lerr == nil && fi.Mode()&os.ModeNamedPipe != 0 {
				t.Errorf("Prepare succeeded and v2/snapshots/b is a FIFO (%v), a hard link of the source's: special files are to be left out", fi.Mode())
			}
		})
	}
}

// Review rev18, break 4 (invariant 3, "never built from an older version",
// and nothing lost): copies keep the source's hard links by remembering
// the first copy of each multi-name source inode by (dev, ino) for the
// whole walk (firstCopyOf). An inode number is not an identity over time:
// once every name of X is gone, the file system gives the number to the
// next file it creates (ext4 does so at once here).
//
// Schedule (ungraceful takeover; the stale holder still works in v1):
// v1/x has two names (the second outside the walk, e.g. a RocksDB
// checkpoint's runtime/ name the zeebe preset skips), so Prepare copies it
// and records (dev, ino X) -> v2/x. Then the stale holder deletes both
// names of X (its snapshot and compaction clean-up) and writes a new file
// y, again with two names, which gets inode number X, at v1/b/y. Prepare
// reaches b/y: nlink 2, key (dev, X) found, finished -> v2/b/y is linked
// to v2/x, X's old bytes. Validation: x is no longer in the source, so
// nothing looks at it; b/y is "a copy" (other inode, same size): passes.
// v2 gets a marker, and b/y holds the content of a deleted file instead
// of its own.
func TestRev18ReusedInodeNumberLinksANewFileToAnOldCopy(t *testing.T) {
	root := t.TempDir()
	src := makeVersion(t, root, 0, 1, map[string]string{"x": "old content X", "b/y": "placeholder"}, 1)
	x := filepath.Join(src, "x") // top-level files are done before subdirectories
	outsideX := filepath.Join(root, "x-second-name")
	if err := os.Link(x, outsideX); err != nil {
		t.Fatal(err)
	}
	var xst unix.Stat_t
	if err := unix.Stat(x, &xst); err != nil {
		t.Fatal(err)
	}
	reused := false
	setHook(t, &testHookFile, func(rel string) {
		if rel != "b/y" || reused {
			return
		}
		// The stale holder: X gone (both names), a new file y with two names.
		for _, p := range []string{x, outsideX} {
			if err := os.Remove(p); err != nil {
				t.Error(err)
			}
		}
		for i := range 2000 {
			tmp := filepath.Join(root, "new-"+string(rune('a'+i%26))+time.Now().Format("150405.000000000"))
			if err := os.WriteFile(tmp, []byte("NEW content Y"), 0o644); err != nil { // same size as X
				t.Error(err)
				return
			}
			var st unix.Stat_t
			if err := unix.Stat(tmp, &st); err != nil {
				t.Error(err)
				return
			}
			if st.Ino != xst.Ino {
				continue // another inode; left lying outside node-0
			}
			if err := os.Link(tmp, filepath.Join(root, "y-second-name")); err != nil {
				t.Error(err)
			}
			if err := os.Rename(tmp, filepath.Join(src, "b/y")); err != nil {
				t.Error(err)
			}
			reused = true
			return
		}
	})
	dir, _, err := Prepare(context.Background(), root, inst(0, 2), Options{Logger: quiet, Workers: 1})
	if !reused {
		t.Skip("the file system did not reuse the inode number")
	}
	if err != nil {
		t.Logf("Prepare refused: %v", err)
		return
	}
	want, _ := os.ReadFile(filepath.Join(src, "b/y"))
	got, _ := os.ReadFile(filepath.Join(dir, "b/y"))
	if !bytes.Equal(got, want) {
		t.Errorf("Prepare(v2) succeeded, v2/b/y = %q, v1/b/y = %q: linked to the copy of a deleted file that had the same inode number", got, want)
	}
}

// Review rev18, break 1b (invariant 3, "never built from an incomplete
// version"): validation walks the source only, so a target entry whose
// source name is gone by then is never judged. docs: "A stale holder that
// is still appending to a mutable file makes validation fail: that is the
// point". Not if it deletes the file after appending (a journal compacting
// its segments, a RocksDB WAL rolled and removed).
//
// Schedule (ungraceful): v1/log/00001.log is copied (7 bytes); before
// validation the stale holder appends to it and then deletes it. v2 gets a
// marker holding a torn copy of a segment that, in the source, had more
// data and no longer exists: a state the source never was in.
func TestRev18TornCopyOfAFileDeletedBeforeValidationPasses(t *testing.T) {
	root := t.TempDir()
	src := makeVersion(t, root, 0, 1, map[string]string{"log/00001.log": "entry1;", "log/00002.log": "entry9;"}, 1)
	seg := filepath.Join(src, "log/00001.log")
	stale, err := os.OpenFile(seg, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Close()
	setHook(t, &testHookBeforeValidate, func(string) {
		if _, err := stale.WriteString("entry2;"); err != nil {
			t.Error(err)
		}
		if err := os.Remove(seg); err != nil {
			t.Error(err)
		}
	})
	dir, _, err := Prepare(context.Background(), root, inst(0, 2), Options{Logger: quiet, VerifyContent: true})
	if err != nil {
		return
	}
	got, _ := os.ReadFile(filepath.Join(dir, "log/00001.log"))
	t.Errorf("Prepare(v2) succeeded with v2/log/00001.log = %q, a torn copy of a file the stale holder appended to and deleted during the preparation (not in v1 any more)", got)
}

// Review rev18, break 5 (invariant 5 and docs "Validation checks every
// symlink in the target the same way, which also catches a file swapped
// for an unsafe symlink between classification and linking"): it checks
// the symlinks of the *source* listing only. Combining break 3 (a link
// takes whatever the name is at linkat time; the type came from getdents)
// with 1b (a target entry whose source name is gone is never judged):
//
// Schedule (graceful, or an immutable name after a crash): Prepare lists
// v1/snapshots (b is DT_REG); a tenant replaces v1/snapshots/b by a
// symlink to a directory outside the data root; Prepare hard-links that
// symlink into v2; the tenant removes v1/snapshots/b before validation.
// v2 is marked valid with snapshots/b -> <outside>, and the broker of v2
// writes there.
func TestRev18UnsafeSymlinkLinkedThenRemovedFromTheSourcePasses(t *testing.T) {
	for _, graceful := range []bool{true, false} {
		t.Run(map[bool]string{true: "graceful", false: "ungraceful, immutable name"}[graceful], func(t *testing.T) {
			root, outside := t.TempDir(), t.TempDir()
			src := makeVersion(t, root, 0, 1, map[string]string{"snapshots/a": "alpha", "snapshots/b": "beta"}, 1)
			b := filepath.Join(src, "snapshots/b")
			swapped := false
			setHook(t, &testHookFile, func(rel string) {
				if rel != "snapshots/a" || swapped {
					return
				}
				swapped = true
				if err := os.Remove(b); err != nil {
					t.Error(err)
				}
				if err := os.Symlink(outside, b); err != nil {
					t.Error(err)
				}
			})
			setHook(t, &testHookBeforeValidate, func(string) {
				if err := os.Remove(b); err != nil {
					t.Error(err)
				}
			})
			dir, _, err := Prepare(context.Background(), root, inst(0, 2),
				Options{Rules: zeebe(t), PreviousGraceful: graceful, Logger: quiet, Workers: 1})
			if !swapped {
				t.Fatal("hook never ran")
			}
			if err != nil {
				return // refused: the documented behaviour
			}
			if to, lerr := os.Readlink(filepath.Join(dir, "snapshots/b")); lerr == nil {
				t.Errorf("Prepare(v2) succeeded; v2 is valid with snapshots/b -> %s (outside the data root)", to)
			}
		})
	}
}
