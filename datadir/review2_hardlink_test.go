package datadir

import (
	"os"
	"path/filepath"
	"testing"
)

// Review 2: the link-or-copy rule is judged per name, never per inode
// (st_nlink is not consulted). A file with two names in the source, one
// matching Options.Immutable and one not, is hard-linked into the target
// under the immutable name: the successor's file is then the very inode
// the stale holder still writes through the mutable name.
//
// Schedule: v1 has log/seg (mutable, written by the broker) and
// snapshots/1/seg, a hard link to it (the broker, or a RocksDB-style
// checkpoint, linked it there). Ungraceful takeover, Immutable
// "snapshots/**": Prepare copies log/seg but links snapshots/1/seg. The
// stale holder keeps appending to v1/log/seg; the bytes appear in
// v2/snapshots/1/seg. Validation passes ("linked files are the same inode").
func TestReview2StaleWritesReachTheSuccessorThroughASecondName(t *testing.T) {
	root := t.TempDir()
	v1 := makeVersion(t, root, 0, 1, map[string]string{"log/seg": "entries 1-10\n"}, 1)
	if err := os.MkdirAll(filepath.Join(v1, "snapshots", "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(v1, "log", "seg"), filepath.Join(v1, "snapshots", "1", "seg")); err != nil {
		t.Fatal(err)
	}
	dir, _ := mustPrepare(t, root, inst(0, 2), Options{Immutable: []string{"snapshots/**"}, Cluster: clusterA})

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

// Review 2: a copy does not keep the source's hard links. Two names of one
// inode become two independent files (cp -a keeps them one file), so a
// write through one name no longer shows through the other in the target.
func TestReview2CopyKeepsHardLinkedFilesIdentical(t *testing.T) {
	root := t.TempDir()
	v1 := makeVersion(t, root, 0, 1, map[string]string{"a": "shared"}, 1)
	if err := os.Link(filepath.Join(v1, "a"), filepath.Join(v1, "b")); err != nil {
		t.Fatal(err)
	}
	dir, _ := mustPrepare(t, root, inst(0, 2), Options{Cluster: clusterA})
	fa, err := os.Stat(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	fb, err := os.Stat(filepath.Join(dir, "b"))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(fa, fb) {
		t.Errorf("a and b are one file (one inode) in v1 but two separate files in the copy %s", dir)
	}
}
