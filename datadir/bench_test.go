package datadir

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// BenchmarkPrepare measures one Prepare of node-0/v1 from node-0/v0.
//
// scripts/bench-datadir.sh drives it through the environment to compare with
// cp -a on the same tree:
//
//	DATADIR_BENCH_ROOT    root holding node-0/v0; generated there if missing;
//	                      node-0/v1 is left for the caller to move away
//	DATADIR_BENCH_FILES   files to generate (default 64)
//	DATADIR_BENCH_BYTES   total bytes to generate (default 64 MiB)
//	DATADIR_BENCH_MODE    "link" (graceful predecessor) or "copy" (default)
//	DATADIR_BENCH_WORKERS Options.Workers (default 0)
//	DATADIR_BENCH_NOFLUSH "1" skips the syncfs before the marker, to compare
//	                      the copy alone with cp -a (which does not flush)
func BenchmarkPrepare(b *testing.B) {
	root, keepTarget := os.Getenv("DATADIR_BENCH_ROOT"), true
	if root == "" {
		root, keepTarget = b.TempDir(), false
	}
	files := envInt(b, "DATADIR_BENCH_FILES", 64)
	total := envInt(b, "DATADIR_BENCH_BYTES", 64<<20)
	workers := envInt(b, "DATADIR_BENCH_WORKERS", 0)
	src := Dir(root, inst(0, 0))
	if _, err := os.Stat(src); err != nil {
		generateTree(b, root, files, total)
	}
	opts := Options{
		PreviousGraceful: os.Getenv("DATADIR_BENCH_MODE") == "link",
		Workers:          workers,
		Keep:             1 << 20, // measure the preparation, not the removal of old runs
		Logger:           quiet,
	}
	if os.Getenv("DATADIR_BENCH_NOFLUSH") == "1" {
		flushBeforeMarker = false
		defer func() { flushBeforeMarker = true }()
	}
	target := Dir(root, inst(0, 1))
	var res Result
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		if err := os.RemoveAll(target); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		var err error
		if _, res, err = Prepare(context.Background(), root, inst(0, 1), opts); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.SetBytes(res.BytesCopied + res.BytesLinked)
	b.ReportMetric(float64(res.FilesCopied), "copied")
	b.ReportMetric(float64(res.FilesLinked), "linked")
	// The script moves the target away rather than deleting it here: ext4
	// avoids reusing recently deleted inodes, and creating files right after
	// deleting ten thousand is several times slower, for cp as for us.
	if !keepTarget {
		if err := os.RemoveAll(target); err != nil {
			b.Fatal(err)
		}
	}
}

func envInt(b *testing.B, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		b.Fatalf("%s=%q: want a non-negative integer", name, s)
	}
	return n
}

// generateTree writes node-0/v0 with files random files of total bytes in
// all, 100 per directory, and a valid marker.
func generateTree(b *testing.B, root string, files, total int) {
	src := Dir(root, inst(0, 0))
	size := total / max(files, 1)
	buf := make([]byte, size)
	rng := rand.NewChaCha8([32]byte{1})
	for i := range files {
		dir := filepath.Join(src, fmt.Sprintf("d%03d", i/100))
		if err := os.MkdirAll(dir, 0o750); err != nil {
			b.Fatal(err)
		}
		rng.Read(buf)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d", i)), buf, 0o640); err != nil {
			b.Fatal(err)
		}
	}
	d, err := os.Open(src)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	if err := writeMarker(d, Marker{InitializedAt: time.Now()}); err != nil {
		b.Fatal(err)
	}
}
