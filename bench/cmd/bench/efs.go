package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/nodeid/nodeid/bench"
	"github.com/nodeid/nodeid/internal/efsfs"
)

// efsFilesDefault is the size of the data directory in make bench.
const efsFilesDefault = 10000

// efsHandoverRep is one graceful handover of a broker whose data directory
// lies on the EFS-like FUSE mount (internal/efsfs, 1 ms per metadata
// operation).
type efsHandoverRep struct {
	Took     time.Duration // SIGTERM to the holder -> replacement logs "command started"
	Prepare  time.Duration // replacement: "acquired node id" -> datadir's "prepared"
	Linked   int64         // files the replacement hard-linked
	Graceful bool
}

// efsHandover: the holder runs with its data root on the mount; its
// directory is then filled with files of 4 KiB (behind the mount, so
// quickly), and the holder is stopped. The replacement links them into its
// own version through the mount before its command starts.
func (b *procBench) efsHandover(ctx context.Context, files int) (efsHandoverRep, error) {
	base, err := os.MkdirTemp(b.tmp, "efs-")
	if err != nil {
		return efsHandoverRep{}, err
	}
	defer os.RemoveAll(base)
	backing, mnt := filepath.Join(base, "backing"), filepath.Join(base, "mnt")
	for _, d := range []string{backing, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return efsHandoverRep{}, err
		}
	}
	fs, err := efsfs.Mount(backing, mnt, efsfs.EFS)
	if err != nil {
		return efsHandoverRep{}, err
	}
	defer fs.Unmount()
	_, holder, waiter, err := b.holderAndWaiter(ctx, "efs-handover", b.g.URL, "NODEID_DATA_ROOT="+mnt)
	if err != nil {
		return efsHandoverRep{}, err
	}
	defer holder.stop()
	defer waiter.stop()
	started, err := holder.waitLog("prepared", time.Time{}, 10*time.Second)
	if err != nil {
		return efsHandoverRep{}, err
	}
	dir, _ := started.Fields["dir"].(string)
	rel, err := filepath.Rel(mnt, dir)
	if err != nil || dir == "" {
		return efsHandoverRep{}, fmt.Errorf("holder's data directory %q not below %s", dir, mnt)
	}
	if err := fillData(filepath.Join(backing, rel), files); err != nil {
		return efsHandoverRep{}, err
	}
	time.Sleep(time.Second + randDuration(time.Second)) // the mount's cache forgets; random phase against the poll
	t0 := time.Now()
	holder.cmd.Process.Signal(syscall.SIGTERM)
	run, err := waiter.waitLog("command started", t0, 5*time.Minute)
	if err != nil {
		return efsHandoverRep{}, err
	}
	acq, err := waiter.waitLog("acquired node id", t0, time.Second)
	if err != nil {
		return efsHandoverRep{}, err
	}
	ready, err := waiter.waitLog("prepared", t0, time.Second)
	if err != nil {
		return efsHandoverRep{}, err
	}
	linked, _ := ready.Fields["files_linked"].(float64)
	g, _ := acq.Fields["previous_graceful"].(bool)
	return efsHandoverRep{Took: run.Time.Sub(t0), Prepare: ready.Time.Sub(acq.Time), Linked: int64(linked), Graceful: g}, nil
}

// fillData writes files of 4 KiB into dir, 100 per subdirectory.
func fillData(dir string, files int) error {
	buf := make([]byte, 4096)
	rng := rand.NewChaCha8([32]byte{2})
	for i := range files {
		sub := filepath.Join(dir, fmt.Sprintf("d%03d", i/100))
		if err := os.MkdirAll(sub, 0o750); err != nil {
			return err
		}
		rng.Read(buf)
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%05d", i)), buf, 0o640); err != nil {
			return err
		}
	}
	return nil
}

// efsHandoverOnly runs the scenario o.reps times and prints a table.
func efsHandoverOnly(ctx context.Context, pb *procBench, o options) error {
	if err := efsfs.Available(); err != nil {
		return fmt.Errorf("the EFS-like mount needs root and /dev/fuse: %w", err)
	}
	load := loadavg()
	var took, prep []float64
	var reps []efsHandoverRep
	for i := range o.reps {
		if err := ctx.Err(); err != nil {
			return err
		}
		rep, err := pb.efsHandover(ctx, o.efsFiles)
		if err != nil {
			return fmt.Errorf("efs-handover %d: %w", i+1, err)
		}
		if !rep.Graceful || rep.Linked != int64(o.efsFiles) {
			return fmt.Errorf("efs-handover %d: graceful %v, %d files linked; want true, %d", i+1, rep.Graceful, rep.Linked, o.efsFiles)
		}
		progress("  efs-handover %.3fs (prepare %.3fs, %d linked)", rep.Took.Seconds(), rep.Prepare.Seconds(), rep.Linked)
		reps = append(reps, rep)
		took = append(took, rep.Took.Seconds())
		prep = append(prep, rep.Prepare.Seconds())
	}
	t, p := bench.Summarize(took), bench.Summarize(prep)
	fmt.Printf("\nGraceful handover, data directory of %d files of 4 KiB on the EFS-like mount (efsfs: %v per metadata op, %v per fsync, %v per read/write, cache %v), default lease settings, %d repetitions, load %s -> %s:\n\n",
		o.efsFiles, efsfs.EFS.Meta, efsfs.EFS.Fsync, efsfs.EFS.Data, efsfs.EFS.Cache, len(reps), load, loadavg())
	fmt.Println("| measure | median | min | max |")
	fmt.Println("|---|---|---|---|")
	fmt.Printf("| SIGTERM to the holder -> successor's broker running (s) | %s | %s | %s |\n", bench.Format(t.Median, 3), bench.Format(t.Min, 3), bench.Format(t.Max, 3))
	fmt.Printf("| of which the successor's Prepare (link mode) (s) | %s | %s | %s |\n", bench.Format(p.Median, 3), bench.Format(p.Min, 3), bench.Format(p.Max, 3))
	verdict := "met"
	if t.Median > 5 {
		verdict = "NOT met"
	}
	fmt.Printf("\nTarget: at most 5 s: %s (median %s s; every run: %v s).\n", verdict, bench.Format(t.Median, 3), slices.Collect(func(yield func(string) bool) {
		for _, x := range took {
			if !yield(bench.Format(x, 3)) {
				return
			}
		}
	}))
	return nil
}
