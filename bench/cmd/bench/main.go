// Command bench measures nodeid against its baseline on a loopback
// VersityGW and writes docs/benchmarks.md (make bench):
//
//   - acquisition storm: N tasks start at once for N IDs, in-process, with
//     the default strategy and with the anchor's sequential strategy, from
//     an empty and from a bootstrapped bucket, on loopback and (for some N)
//     with 20-40 ms added to every request;
//   - graceful handover, crash failover, loss detection (outside overwrite,
//     S3 blackhole) with nodeid-init processes;
//   - steady-state cost of an idle `nodeid-init run`: requests, price,
//     memory and CPU.
//
// Usage:
//
//	go run ./bench/cmd/bench [-reps 5] [-quick] [-sizes 10,50,100] [-aws-like-sizes 10,50] [-out docs/benchmarks.md]
//
// Every wait is bounded and every process it starts dies with it
// (Pdeathsig), so it is safe on a shared machine.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/nodeid/nodeid/internal/efsfs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nodeid/nodeid/nodeid"
)

type options struct {
	reps            int
	quick           bool
	out             string
	sizes           []int
	awsSizes        []int // storm sizes also run with the aws-like network
	failoverLeases  []time.Duration
	idleWindow      time.Duration
	stormTimeout    time.Duration
	nodeidInit      string
	skip            map[string]bool
	datadirMB       int
	efsFiles        int   // > 0: only the graceful handover on the EFS-like mount, with this many files
	memStormSizes   []int // storm sizes run on the in-memory bucket only
	scaleSizes      []int
	scaleLegacy     []int // sizes also measured with the refresh of before issue 25
	scaleLease      time.Duration
	scaleOnly       bool
	stormOnlyMemory bool
	args            []string
}

func main() {
	var o options
	var sizes, awsSizes, skip, leases, scaleSizes, scaleLegacy, memStorm string
	flag.IntVar(&o.reps, "reps", 5, "repetitions of every scenario")
	flag.BoolVar(&o.quick, "quick", false, "check that the program works: 1 repetition, N = 10 only, short windows")
	flag.StringVar(&o.out, "out", "", "write the report (Markdown) to this file, e.g. docs/benchmarks.md; it is always printed")
	flag.StringVar(&sizes, "sizes", "10,50,100", "storm sizes N, comma-separated")
	flag.StringVar(&awsSizes, "aws-like-sizes", "10,50", "storm sizes also run with every request delayed 20-40 ms (aws-like), comma-separated; empty: none")
	flag.StringVar(&leases, "failover-leases", "5s,15s", "lease durations of the crash-failover scenario, comma-separated (-quick: the first only)")
	flag.DurationVar(&o.idleWindow, "idle-window", 60*time.Second, "steady-state measurement window")
	flag.DurationVar(&o.stormTimeout, "storm-timeout", 3*time.Minute, "acquire timeout of each storm task")
	flag.StringVar(&o.nodeidInit, "nodeid-init", "", "nodeid-init binary (default: built from ./cmd/nodeid-init)")
	flag.StringVar(&skip, "skip", "", "scenarios to skip, comma-separated: storm,handover,failover,overwrite,blackhole,idle,efs-handover,scale")
	flag.IntVar(&o.datadirMB, "datadir-mb", 0, "also run scripts/bench-datadir.sh with BENCH_DATADIR_MB set to this (0: only quote docs/datadir.md)")
	flag.IntVar(&o.efsFiles, "efs-handover", 0, "run only the graceful handover of a data directory of this many files of 4 KiB on the EFS-like FUSE mount (root, /dev/fuse), and print its table (make bench-efs-handover)")
	flag.StringVar(&memStorm, "memory-storm-sizes", "1000", "storm sizes run in process on an in-memory bucket (too large for VersityGW on this machine)")
	flag.StringVar(&scaleSizes, "scale-sizes", "10,100,1000", "cluster sizes of the steady-state scale scenario (in process, gofakes3)")
	flag.StringVar(&scaleLegacy, "scale-before-sizes", "10,100", "scale sizes also measured with the refresh of before issue 25")
	flag.DurationVar(&o.scaleLease, "scale-lease", 6*time.Second, "lease duration of the scale scenario up to N = 100 (counts per L do not depend on it); larger N use at least the default L, for room on this machine")
	flag.BoolVar(&o.stormOnlyMemory, "memory-storm-only", false, "run only the in-memory storms (-memory-storm-sizes) and print the storm table")
	flag.BoolVar(&o.scaleOnly, "scale-only", false, "run only the scale scenario (no VersityGW) and print its section")
	flag.Parse()
	o.args = os.Args[1:]
	o.scaleSizes = intList("scale-sizes", scaleSizes)
	o.memStormSizes = intList("memory-storm-sizes", memStorm)
	o.scaleLegacy = intList("scale-before-sizes", scaleLegacy)
	o.skip = map[string]bool{}
	for _, s := range strings.Split(skip, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.skip[s] = true
		}
	}
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fatalf("bad -sizes %q", sizes)
		}
		o.sizes = append(o.sizes, n)
	}
	for _, s := range strings.Split(awsSizes, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			fatalf("bad -aws-like-sizes %q", awsSizes)
		}
		o.awsSizes = append(o.awsSizes, n)
	}
	for _, s := range strings.Split(leases, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || d <= 0 {
			fatalf("bad -failover-leases %q", leases)
		}
		o.failoverLeases = append(o.failoverLeases, d)
	}
	if o.quick {
		o.failoverLeases = o.failoverLeases[:1]
		o.reps = min(o.reps, 2)
		if !flagSet("reps") {
			o.reps = 1
		}
		o.sizes = []int{10}
		if !flagSet("idle-window") {
			o.idleWindow = 10 * time.Second
		}
	}
	if o.reps < 1 {
		fatalf("-reps must be >= 1")
	}
	if o.quick && !flagSet("memory-storm-sizes") {
		o.memStormSizes = nil
	}
	if o.quick && !flagSet("scale-sizes") {
		o.scaleSizes, o.scaleLegacy = []int{10}, []int{10}
	}

	// The whole run is bounded; a signal ends it and, through Pdeathsig,
	// every process it started.
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx, cancelRun := context.WithTimeout(ctx, 28*time.Minute)
	defer cancelRun()

	if err := run(ctx, o); err != nil {
		fatalf("%v", err)
	}
}

// intList parses a comma-separated list of positive integers.
func intList(name, s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			fatalf("bad -%s %q", name, s)
		}
		out = append(out, n)
	}
	return out
}

func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
	os.Exit(1)
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func run(ctx context.Context, o options) error {
	started := time.Now()
	if o.stormOnlyMemory {
		r := &report{opts: o, start: started, storm: map[stormKey][]stormResult{}}
		o.sizes = nil
		r.opts.sizes = nil
		if err := stormMemory(ctx, o, r); err != nil {
			return err
		}
		var b strings.Builder
		r.stormSection(&b)
		fmt.Print(b.String())
		return nil
	}
	if o.scaleOnly {
		r := &report{opts: o, start: started}
		var err error
		if r.scale, err = scaleAll(ctx, o.scaleSizes, o.scaleLegacy, o.scaleLease); err != nil {
			return fmt.Errorf("scale: %w", err)
		}
		var b strings.Builder
		r.scaleSection(&b)
		fmt.Print(b.String())
		for _, v := range r.verdicts {
			fmt.Printf("- %s\n", v)
		}
		return nil
	}
	tmp, err := os.MkdirTemp("", "nodeid-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	bin := o.nodeidInit
	if bin == "" {
		bin = filepath.Join(tmp, "nodeid-init")
		progress("building nodeid-init")
		if out, err := exec.Command("go", "build", "-o", bin, "./cmd/nodeid-init").CombinedOutput(); err != nil {
			return fmt.Errorf("go build ./cmd/nodeid-init (run from the repository root): %v\n%s", err, out)
		}
	}
	gwBin, err := findVersity()
	if err != nil {
		return err
	}
	g, err := startGateway(ctx, gwBin, tmp)
	if err != nil {
		return err
	}
	defer g.stop()
	progress("versitygw on %s", g.URL)

	if o.efsFiles > 0 {
		return efsHandoverOnly(ctx, &procBench{g: g, bin: bin, tmp: tmp}, o)
	}

	r := &report{opts: o, machine: machineNotes(gwBin), start: started}
	r.loadStart = loadavg()

	if !o.skip["storm"] {
		if err := stormAll(ctx, g, o, r); err != nil {
			return fmt.Errorf("storm: %w", err)
		}
	}
	pb := &procBench{g: g, bin: bin, tmp: tmp}
	if err := repeat(ctx, o, "handover", func() error {
		rep, err := pb.handover(ctx)
		if err == nil {
			r.handover = append(r.handover, rep)
			progress("  handover %.3fs", rep.Took.Seconds())
		}
		return err
	}); err != nil {
		return err
	}
	r.failover = map[time.Duration][]failoverRep{}
	for _, lease := range o.failoverLeases {
		if err := repeat(ctx, o, "failover", func() error {
			rep, err := pb.failover(ctx, lease)
			if err == nil {
				r.failover[lease] = append(r.failover[lease], rep)
				progress("  failover (L = %v) %.3fs", lease, rep.Took.Seconds())
			}
			return err
		}); err != nil {
			return err
		}
	}
	if err := repeat(ctx, o, "overwrite", func() error {
		rep, err := pb.overwrite(ctx)
		if err == nil {
			r.overwrite = append(r.overwrite, rep)
			progress("  overwrite: lost after %.3fs, exited after %.3fs, code %d", rep.Lost.Seconds(), rep.Fenced.Seconds(), rep.ExitCode)
		}
		return err
	}); err != nil {
		return err
	}
	if err := repeat(ctx, o, "blackhole", func() error {
		rep, err := pb.blackhole(ctx)
		if err == nil {
			r.blackhole = append(r.blackhole, rep)
			progress("  blackhole: fenced %.3fs, taken over %.3fs after the last renewal", rep.Fenced.Seconds(), rep.Takeover.Seconds())
		}
		return err
	}); err != nil {
		return err
	}
	if !o.skip["idle"] {
		progress("idle: %d nodes for %v", o.reps, o.idleWindow)
		reps, err := pb.idle(ctx, o.reps, o.idleWindow)
		if err != nil {
			return fmt.Errorf("idle: %w", err)
		}
		r.idle = reps
	}
	if !o.skip["efs-handover"] {
		if err := efsfs.Available(); err != nil {
			progress("efs-handover: skipped: %v", err)
			r.efsSkipped = err.Error()
		} else if err := repeat(ctx, o, "efs-handover", func() error {
			rep, err := pb.efsHandover(ctx, efsFilesDefault)
			if err == nil {
				r.efsHandover = append(r.efsHandover, rep)
				progress("  efs-handover %.3fs (prepare %.3fs, %d linked)", rep.Took.Seconds(), rep.Prepare.Seconds(), rep.Linked)
			}
			return err
		}); err != nil {
			return err
		}
	}
	if !o.skip["scale"] && len(o.scaleSizes) > 0 {
		if r.scale, err = scaleAll(ctx, o.scaleSizes, o.scaleLegacy, o.scaleLease); err != nil {
			return fmt.Errorf("scale: %w", err)
		}
	}
	r.datadir = datadirFigures(ctx, o.datadirMB)
	r.loadEnd = loadavg()
	r.took = time.Since(started)

	text := r.markdown()
	fmt.Print(text)
	if o.out != "" {
		if err := os.WriteFile(o.out, []byte(text), 0o644); err != nil {
			return err
		}
		progress("wrote %s", o.out)
	}
	return nil
}

// repeat runs one process-level scenario o.reps times.
func repeat(ctx context.Context, o options, name string, f func() error) error {
	if o.skip[name] {
		return nil
	}
	progress("%s: %d repetitions", name, o.reps)
	for i := 0; i < o.reps; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := f(); err != nil {
			return fmt.Errorf("%s, repetition %d: %w", name, i+1, err)
		}
	}
	return nil
}

// stormKey names one storm configuration.
type stormKey struct {
	N        int
	Net      string // netProfile.Name
	Cold     bool
	Strategy nodeid.AcquireStrategy
}

var strategies = []nodeid.AcquireStrategy{nodeid.StrategySpread, nodeid.StrategySequential}

// stormAll interleaves the strategies within each repetition, so drift in
// the machine's load affects both alike and the ratios come from one run.
func stormAll(ctx context.Context, g *gateway, o options, r *report) error {
	r.storm = map[stormKey][]stormResult{}
	var err error
	if r.opCost, err = measureOpCost(ctx, g, 50); err != nil {
		return fmt.Errorf("server cost per operation: %w", err)
	}
	for _, n := range o.stormSizes() {
		nets := o.netProfiles(n)
		reps := o.reps
		if nets[0] == inMemory {
			reps = min(reps, 2) // a sequential storm of 1,000 takes minutes
		}
		progress("storm N=%d: %d repetitions", n, reps)
		for i := 0; i < reps; i++ {
			for _, net := range nets {
				for _, cold := range []bool{true, false} {
					for _, s := range strategies {
						if err := ctx.Err(); err != nil {
							return err
						}
						var res stormResult
						var err error
						if net == inMemory {
							res, err = runMemStorm(ctx, s, n, cold, max(o.stormTimeout, 10*time.Minute))
						} else {
							res, err = runStorm(ctx, g, s, n, cold, net, o.stormTimeout)
						}
						if err != nil {
							return fmt.Errorf("storm of %d, %s, %s, cold=%t: %w", n, net.Name, s, cold, err)
						}
						k := stormKey{n, net.Name, cold, s}
						r.storm[k] = append(r.storm[k], res)
						progress("  N=%d %-8s cold=%-5t %-10s %7.3fs %6d requests, server CPU %.2fs, %d waited a poll, slowest LIST/GET/PUT %v/%v/%v", n, net.Name, cold, s, res.Took.Seconds(), res.Total, res.ServerCPU, res.Waited,
							res.OpWorst["LIST"].Round(time.Millisecond), res.OpWorst["GET"].Round(time.Millisecond), res.OpWorst["PUT"].Round(time.Millisecond))
					}
				}
			}
		}
	}
	return nil
}

// stormSizes are the storm sizes on VersityGW, then in memory.
func (o options) stormSizes() []int {
	return append(slices.Clone(o.sizes), o.memStormSizes...)
}

// netProfiles are the networks the storm of n tasks runs on.
func (o options) netProfiles(n int) []netProfile {
	if slices.Contains(o.memStormSizes, n) && !slices.Contains(o.sizes, n) {
		return []netProfile{inMemory}
	}
	if slices.Contains(o.awsSizes, n) {
		return []netProfile{loopback, awsLike}
	}
	return []netProfile{loopback}
}

// loadavg is the 1-minute load average: on a shared machine it says how
// much else was running.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// machineNotes describes where the figures come from.
type machine struct {
	NProc, GoVersion, Kernel, CPU, Memory, Versity, Commit string
}

func machineNotes(gwBin string) machine {
	m := machine{NProc: cmdOut("nproc"), GoVersion: cmdOut("go", "version"), Kernel: cmdOut("uname", "-srm")}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		if f := strings.Fields(line); len(f) >= 2 {
			if kb, err := strconv.Atoi(f[1]); err == nil {
				m.Memory = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
			}
		}
	}
	// versitygw --version says "git" when installed with go install; the
	// module version is in the build information.
	m.Versity = "VersityGW"
	for _, line := range strings.Split(cmdOut("go", "version", "-m", gwBin), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "mod" {
			m.Versity = "VersityGW " + f[2] + " (posix backend)"
		}
	}
	m.Commit = cmdOut("git", "rev-parse", "--short", "HEAD")
	if out, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(out) > 0 {
		m.Commit += " (with uncommitted changes in the tree)"
	}
	return m
}

func cmdOut(name string, args ...string) string {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || len(out) == 0 {
			return "?"
		}
	}
	return strings.TrimSpace(string(out))
}
