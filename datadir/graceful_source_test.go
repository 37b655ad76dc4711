package datadir

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// PreviousGraceful says that the holder of K-1 stopped, nothing about an
// older version's holder. When v(K-1) has lost its marker (deleted by a
// tenant, or by another provider's GC walk), it is "not ours" and skipped,
// and vK is built from v(K-2), the newest complete version: the
// predecessor's data rolled back, which is accepted (the node must start)
// and reported. v(K-2)'s holder may be a stale one still writing (K-1
// took it over ungracefully), so nothing of it is linked.
func TestGracefulLinksOnlyThePredecessorsVersion(t *testing.T) {
	root := t.TempDir()
	v1 := makeVersion(t, root, 0, 1, map[string]string{"journal": "v1 data, a stale holder of v1 still writes it"}, 1)
	v2 := makeVersion(t, root, 0, 2, map[string]string{"journal": "v2 data, complete, written by the graceful holder of v2"}, 2)
	if err := os.Remove(filepath.Join(v2, MarkerName)); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	dir, res, err := Prepare(t.Context(), root, inst(0, 3), Options{PreviousGraceful: true, Logger: slog.New(rec)})
	if err != nil {
		t.Fatalf("Prepare of v3 without a complete v2: %v (the node must still start)", err)
	}
	if !res.HasSource || res.Source != 1 || !res.PredecessorIncomplete {
		t.Errorf("source %v/v%d, PredecessorIncomplete %v; want v1, the newest complete version, and the rollback reported",
			res.HasSource, res.Source, res.PredecessorIncomplete)
	}
	if !rec.has("the graceful predecessor's version is not complete: the source is prepared as after an ungraceful takeover") {
		t.Error("the rollback past the predecessor's version was not logged")
	}
	if sameInode(t, v1, dir, "journal") {
		t.Errorf("v3/journal is a hard link to v1/journal: PreviousGraceful (the holder of v2 stopped) applied to v1, whose holder may still write it")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "journal")); err != nil || string(b) != "v1 data, a stale holder of v1 still writes it" {
		t.Errorf("v3/journal = %q, %v; want v1's content", b, err)
	}
	if !exists(t, filepath.Join(v2, "journal")) {
		t.Error("v2 (not ours without its marker) was removed")
	}

	// The predecessor's own complete version is linked.
	v4, res := mustPrepare(t, root, inst(0, 4), Options{PreviousGraceful: true})
	if res.Source != 3 || res.PredecessorIncomplete || res.FilesLinked != 1 || !sameInode(t, dir, v4, "journal") {
		t.Errorf("v4 from v%d, PredecessorIncomplete %v, %d linked; want v3, every file linked", res.Source, res.PredecessorIncomplete, res.FilesLinked)
	}
}

// A first tenure has no predecessor's version to miss: a graceful v1 on an
// empty node directory is not a rollback, and says nothing about one.
func TestGracefulFirstTenureReportsNoMissingPredecessor(t *testing.T) {
	root := t.TempDir()
	rec := &recorder{}
	_, res, err := Prepare(t.Context(), root, inst(0, 1), Options{PreviousGraceful: true, Logger: slog.New(rec)})
	if err != nil {
		t.Fatalf("Prepare of a first v1: %v", err)
	}
	if res.HasSource || res.PredecessorIncomplete {
		t.Errorf("HasSource %v, PredecessorIncomplete %v; want neither for a first tenure", res.HasSource, res.PredecessorIncomplete)
	}
	if rec.has("the graceful predecessor's version is not complete: the source is prepared as after an ungraceful takeover") {
		t.Error("a first tenure was logged as a rollback past its predecessor's version")
	}
}
