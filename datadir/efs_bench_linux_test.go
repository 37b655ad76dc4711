package datadir

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/nodeid/nodeid/internal/efsfs"
)

// BenchmarkPrepareEFS measures Prepare on the EFS-like FUSE mount
// (internal/efsfs, 1 ms per metadata operation), in link and copy mode,
// and reports the operations that reached the file system per file, by
// phase. DATADIR_BENCH_FILES (default 10000) files of 4 KiB;
// DATADIR_BENCH_WORKERS sets Options.Workers. Needs root and /dev/fuse.
// scripts/bench-datadir.sh compares with cp on the same kind of mount.
func BenchmarkPrepareEFS(b *testing.B) {
	files := envInt(b, "DATADIR_BENCH_FILES", 10000)
	workers := envInt(b, "DATADIR_BENCH_WORKERS", 0)
	for _, mode := range []string{"link", "copy"} {
		b.Run(mode, func(b *testing.B) {
			fs := efsfs.MountT(b, efsfs.EFS)
			// Generated behind the mount's back: no latency.
			generateTree(b, fs.Backing, files, files*4096)
			opts := Options{PreviousGraceful: mode == "link", Workers: workers, Keep: 1 << 20, Logger: quiet}
			var copyOps, validateOps int64
			setHook(b, &testHookBeforeValidate, func(string) { copyOps = total(fs) })
			setHook(b, &testHookAfterMarker, func(string) { validateOps = total(fs) - copyOps })
			b.ResetTimer()
			for i := range b.N {
				fs.ResetCounts()
				// A new version each time: removing the last through
				// the mount would take longer than preparing it.
				if _, _, err := Prepare(context.Background(), fs.Dir, inst(0, nodeidVersion(int64(i+1))), opts); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			n := float64(files)
			b.ReportMetric(float64(copyOps)/n, "copy-ops/file")
			b.ReportMetric(float64(validateOps)/n, "validate-ops/file")
			b.ReportMetric(float64(total(fs))/n, "ops/file")
			if os.Getenv("DATADIR_BENCH_VERBOSE") != "" {
				fmt.Fprintf(os.Stderr, "%s: operations of the last run: %v\n", mode, fs.Counts())
			}
		})
	}
}

func total(fs *efsfs.FS) (n int64) {
	for _, c := range fs.Counts() {
		n += c
	}
	return n
}
