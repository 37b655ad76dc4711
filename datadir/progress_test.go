package datadir

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// Options.Progress is what nodeid-init's watchdog watches for a hang: it
// moves per entry and per chunk of bytes, so one large file is progress
// too, and so is garbage collection.
func TestProgressCountsEntriesChunksAndRemovals(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{}
	for i := range 10 {
		files[fmt.Sprintf("f%d", i)] = "x"
	}
	src := makeVersion(t, root, 0, 1, files, 1)
	const size = 3*copyChunk + 1
	if err := os.WriteFile(filepath.Join(src, "large"), make([]byte, size), 0o640); err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	_, res := mustPrepare(t, root, inst(0, 2), Options{Progress: &n, VerifyContent: true})
	if res.FilesCopied != 11 {
		t.Fatalf("FilesCopied = %d, want 11", res.FilesCopied)
	}
	// Each file copied and validated, the large one's 4 copy chunks and
	// its 49 compared chunks of 1 MiB, and the two directories listed.
	if want := int64(2*11 + 4 + size>>20 + 1 + 2); n.Load() < want {
		t.Errorf("Progress = %d after the copy, want at least %d", n.Load(), want)
	}
	mustPrepare(t, root, inst(0, 3), Options{Keep: 3})
	before := n.Load()
	removed, err := Collect(t.Context(), root, inst(0, 3), Options{Keep: 1, Progress: &n})
	if err != nil || len(removed) != 2 {
		t.Fatalf("Collect = %v, %v; want v1 and v2 removed", removed, err)
	}
	if got := n.Load() - before; got < 2*11 {
		t.Errorf("Progress moved %d while two versions of 11 files were removed, want at least %d", got, 2*11)
	}
}
