package datadir

import (
	"os"
	"path/filepath"
	"testing"
)

// After an ungraceful takeover a file is linked only if it has one name
// (st_nlink 1): a file with two names in the source, one matching
// Options.Immutable and one not, used to be linked under the immutable name
// (review 2), so the successor's file was the very inode the stale holder
// still writes through the mutable name.
//
// Schedule: v1 has log/seg (mutable, written by the broker) and
// snapshots/1/seg, a hard link to it (the broker, or a RocksDB-style
// checkpoint, linked it there). Ungraceful takeover, Immutable
// "snapshots/**": Prepare must copy both. The stale holder keeps
// appending to v1/log/seg; the bytes must not appear in v2/snapshots/1/seg.
func TestImmutableFileWithASecondNameIsCopied(t *testing.T) {
	root := t.TempDir()
	v1 := makeVersion(t, root, 0, 1, map[string]string{"log/seg": "entries 1-10\n"}, 1)
	if err := os.MkdirAll(filepath.Join(v1, "snapshots", "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(v1, "log", "seg"), filepath.Join(v1, "snapshots", "1", "seg")); err != nil {
		t.Fatal(err)
	}
	dir, res := mustPrepare(t, root, inst(0, 2), Options{Immutable: []string{"snapshots/**"}, Cluster: clusterA})
	if res.FilesLinked != 0 {
		t.Errorf("%d files linked, want 0", res.FilesLinked)
	}

	// The stale holder of v1 is still running and appends to its log.
	f, err := os.OpenFile(filepath.Join(v1, "log", "seg"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("STALE WRITE after the takeover\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()

	b, err := os.ReadFile(filepath.Join(dir, "snapshots", "1", "seg"))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "entries 1-10\n" {
		t.Errorf("the stale holder's write reached the successor's directory: %s/snapshots/1/seg = %q", dir, b)
	}
}

// A copy keeps the source's hard links, as cp -a does: two names of one
// inode become two names of one new inode (review 2: they became two
// independent files), in one directory or in two, with any Workers.
func TestCopyKeepsHardLinks(t *testing.T) {
	for _, workers := range []int{1, 4} {
		root := t.TempDir()
		v1 := makeVersion(t, root, 0, 1, map[string]string{"a": "shared", "d/x": "other", "z/y": "more"}, 1)
		for _, name := range []string{"b", "d/c", "z/c"} {
			if err := os.Link(filepath.Join(v1, "a"), filepath.Join(v1, name)); err != nil {
				t.Fatal(err)
			}
		}
		dir, res := mustPrepare(t, root, inst(0, 2), Options{Cluster: clusterA, Workers: workers})
		src, err := os.Stat(filepath.Join(v1, "a"))
		if err != nil {
			t.Fatal(err)
		}
		fa, err := os.Stat(filepath.Join(dir, "a"))
		if err != nil {
			t.Fatal(err)
		}
		if os.SameFile(fa, src) {
			t.Fatalf("workers %d: a was linked to the source, not copied", workers)
		}
		for _, name := range []string{"b", "d/c", "z/c"} {
			fb, err := os.Stat(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if !os.SameFile(fa, fb) {
				t.Errorf("workers %d: a and %s are one file in v1 but two separate files in the copy %s", workers, name, dir)
			}
		}
		if res.BytesCopied != int64(len("shared")+len("other")+len("more")) {
			t.Errorf("workers %d: %d bytes copied, want each byte counted once", workers, res.BytesCopied)
		}
	}
}
