package datadir

import (
	"os"
	"path/filepath"
	"testing"
)

// Review rev24 (invariant 3: built from an older version; writes from a
// stale holder through hard links). PreviousGraceful says that the holder
// of K-1 stopped. Prepare applies it to whatever source it picks: when
// v(K-1), the graceful predecessor's complete directory, has lost its
// marker (deleted by a tenant, or by another provider's GC walk), it is
// "not ours" and skipped, and vK is built from v(K-2) (the predecessor's
// data rolled back) with every file hard-linked, although the holder of
// K-2 may be a stale holder still writing (K-1 took it over ungracefully;
// only K-1's release was graceful).
func TestReviewRev24GracefulLinksOnlyThePredecessorsVersion(t *testing.T) {
	root := t.TempDir()
	v1 := makeVersion(t, root, 0, 1, map[string]string{"journal": "v1 data, a stale holder of v1 still writes it"}, 1)
	v2 := makeVersion(t, root, 0, 2, map[string]string{"journal": "v2 data, complete, written by the graceful holder of v2"}, 2)
	if err := os.Remove(filepath.Join(v2, MarkerName)); err != nil {
		t.Fatal(err)
	}
	dir, res, err := Prepare(t.Context(), root, inst(0, 3), Options{PreviousGraceful: true, Logger: quiet})
	if err != nil {
		t.Logf("refused: %v", err) // refusing is fine
		return
	}
	if res.Source != 2 {
		t.Errorf("v3 built from v%d, not from v2, the graceful predecessor's directory (rolled back)", res.Source)
	}
	if sameInode(t, v1, dir, "journal") {
		t.Errorf("v3/journal is a hard link to v1/journal: PreviousGraceful (the holder of v2 stopped) applied to v1, whose holder may still write it")
	}
}
