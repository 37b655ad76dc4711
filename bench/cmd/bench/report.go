package main

import (
	"context"
	"fmt"
	"github.com/nodeid/nodeid/internal/efsfs"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodeid/nodeid/bench"
	"github.com/nodeid/nodeid/nodeid"
)

// List prices, us-east-1, S3 Standard, per 1,000 requests.
const (
	pricePUT   = 0.005  // PUT, COPY, POST, LIST
	priceGET   = 0.0004 // GET, SELECT and all other requests
	hoursMonth = 730    // AWS's month for pricing
)

// Defaults of the command, for the steady-state formula.
const (
	defL = nodeid.DefaultLeaseDuration
	defR = defL / 3
	defM = defL / 5
	defP = nodeid.DefaultPollInterval
)

type report struct {
	opts               options
	machine            machine
	start              time.Time
	took               time.Duration
	loadStart, loadEnd string

	storm       map[stormKey][]stormResult
	opCost      opCost
	handover    []handoverRep
	efsHandover []efsHandoverRep
	efsSkipped  string                          // why the EFS-like scenario did not run
	failover    map[time.Duration][]failoverRep // by lease duration
	overwrite   []overwriteRep
	blackhole   []blackholeRep
	idle        []idleRep
	scale       []scaleRep
	datadir     string

	verdicts []string
}

func (r *report) verdict(met bool, format string, args ...any) string {
	v := "**missed**"
	if met {
		v = "met"
	}
	line := fmt.Sprintf(format, args...) + ": " + v
	r.verdicts = append(r.verdicts, line)
	return v
}

func (r *report) markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	body := r.body()

	w("# Benchmarks\n\n")
	w("Command: `go run ./bench/cmd/bench %s` (what `make bench` runs), %s, %s in all.\n\n",
		strings.Join(r.opts.args, " "), r.start.UTC().Format("2006-01-02 15:04 MST"), r.took.Round(time.Second))
	w("Everything runs on one machine against VersityGW (posix backend) on loopback: the times are those of\n")
	w("the protocol, its timers and this S3 server, not of AWS S3. Only the storm's *aws-like* rows add a\n")
	w("network: 20–40 ms per request, injected by a proxy. Request counts do not depend on the machine;\n")
	w("latencies and therefore storm times do.\n\n")
	if r.opts.quick {
		w("> **Quick mode** (`-quick`): one repetition, N = 10 only, short windows. The figures only show that\n> the program works.\n\n")
	}
	w("## Machine\n\n")
	w("| | |\n| --- | --- |\n")
	m := r.machine
	w("| `nproc` | %s |\n| CPU | %s |\n| memory | %s |\n| kernel | %s |\n| `go version` | %s |\n| S3 server | %s |\n| commit | %s |\n| load average (1, 5, 15 min) | %s at the start, %s at the end |\n\n",
		m.NProc, m.CPU, m.Memory, m.Kernel, m.GoVersion, m.Versity, m.Commit, r.loadStart, r.loadEnd)
	w("The machine is shared with other work, so single figures are noisy: every figure is the median of\n")
	w("%d repetitions with min–max in brackets (`median [min–max]`).\n\n", r.opts.reps)
	w("## Targets\n\n")
	for _, v := range r.verdicts {
		w("- %s\n", v)
	}
	w("\n")
	b.WriteString(body)
	return b.String()
}

// body renders the sections; it fills r.verdicts as it goes.
func (r *report) body() string {
	var b strings.Builder
	if r.storm != nil {
		r.stormSection(&b)
	}
	if len(r.handover) > 0 {
		r.handoverSection(&b)
	}
	if len(r.efsHandover) > 0 || r.efsSkipped != "" {
		r.efsHandoverSection(&b)
	}
	if len(r.failover) > 0 {
		r.failoverSection(&b)
	}
	if len(r.overwrite) > 0 || len(r.blackhole) > 0 {
		r.lossSection(&b)
	}
	if len(r.idle) > 0 {
		r.idleSection(&b)
	}
	if len(r.scale) > 0 {
		r.scaleSection(&b)
	}
	r.datadirSection(&b)
	return b.String()
}

func secs(ds []time.Duration) bench.Summary { return bench.Summarize(bench.Seconds(ds)) }

func (r *report) stormSection(b *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("## Acquisition storm\n\n")
	w("N tasks start at once (in-process `nodeid.Provider`s, each with its own S3 client and\n")
	w("`*nodeid.S3Repository`, whose `Requests()` counts every HTTP request, SDK retries included) for N\n")
	w("IDs; the time runs until the last task holds its ID, and the IDs are checked to be distinct.\n")
	w("**spread** is the default strategy (one LIST, then a task-specific first candidate);\n")
	w("**sequential** is the baseline, the anchor's strategy (`nodeid.Config{Strategy: nodeid.StrategySequential}`:\n")
	w("IDs 0..N-1 in order, GET then conditional PUT each, backoff 1 s doubling to 30 s after a full pass).\n")
	w("*cold*: empty bucket, the tasks create the lease objects and the cluster marker themselves;\n")
	w("*bootstrapped*: `nodeid.Initialize` ran first.\n")
	w("The two strategies alternate within each repetition, on a fresh bucket each time.\n\n")
	var awsRun []int
	for _, n := range r.opts.sizes {
		if len(r.opts.netProfiles(n)) > 1 {
			awsRun = append(awsRun, n)
		}
	}
	w("**loopback**: the tasks talk to the gateway directly; a round trip costs well under a millisecond, so\n")
	w("the gateway's CPU, shared with the N tasks on %s cores, is the bottleneck.", r.machine.NProc)
	if len(awsRun) > 0 {
		w(" **aws-like**: every request of the\n")
		w("tasks goes through a `faultproxy` that delays it by %v plus a random %v\n", awsLike.Latency, awsLike.Jitter)
		w("(`faultproxy.Fault{Latency: %v, Jitter: %v}`), about the round trip of a small S3 request within an AWS\n", awsLike.Latency, awsLike.Jitter)
		w("region; the gateway is then mostly idle and the time follows the longest chain of round trips of one task\n")
		w("(N = %s only, to keep the run short).", joinInts(awsRun, ", "))
	}
	w(" *server CPU* is the gateway's CPU time during the storm.")
	if len(r.opts.memStormSizes) > 0 {
		w(" **in-memory** (N = %s): the tasks share an in-memory bucket with S3's conditional\n", joinInts(r.opts.memStormSizes, ", "))
		w("writes and 1,000-key pages (no HTTP: a thousand tasks and a gateway do not fit this machine), each request\n")
		w("taking 2 ms; requests are counted as S3 bills them, latencies are not measured, and at most 2 repetitions run.")
	}
	w("\n\n")
	w("| N | network | start | strategy | time (s) | server CPU (s) | requests, all tasks | per task: median, max | LIST / GET / PUT | mean latency LIST / GET / PUT (ms) | tasks that waited a poll |\n")
	w("| ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	type agg struct{ time, total, cpu bench.Summary }
	sums := map[stormKey]agg{}
	for _, n := range r.opts.stormSizes() {
		for _, net := range r.opts.netProfiles(n) {
			for _, cold := range []bool{true, false} {
				for _, s := range strategies {
					k := stormKey{n, net.Name, cold, s}
					res := r.storm[k]
					if len(res) == 0 {
						continue
					}
					var took []time.Duration
					var total, per, waited, cpu []float64
					byOp := map[string][]float64{}
					opN := map[string]int{}
					opTime := map[string]time.Duration{}
					for _, x := range res {
						took = append(took, x.Took)
						total = append(total, float64(x.Total))
						cpu = append(cpu, x.ServerCPU)
						per = append(per, x.PerTask...)
						waited = append(waited, float64(x.Waited))
						for _, op := range stormOps {
							byOp[op] = append(byOp[op], float64(x.Ops[op]))
							opN[op] += x.Ops[op]
							opTime[op] += x.OpTime[op]
						}
					}
					a := agg{secs(took), bench.Summarize(total), bench.Summarize(cpu)}
					sums[k] = a
					ps := bench.Summarize(per)
					var counts, lat []string
					for _, op := range stormOps {
						counts = append(counts, bench.Format(bench.Median(byOp[op]), 0))
						mean := math.NaN()
						if opN[op] > 0 {
							mean = float64(opTime[op].Microseconds()) / 1000 / float64(opN[op])
						}
						lat = append(lat, bench.Format(mean, 1))
					}
					w("| %d | %s | %s | %s | %s | %s | %s | %s, %s | %s | %s | %s |\n", n, net.Name, startName(cold), s, a.time.Spread(2), a.cpu.Spread(2), a.total.Spread(0),
						bench.Format(ps.Median, 0), bench.Format(ps.Max, 0), strings.Join(counts, " / "), strings.Join(lat, " / "),
						bench.Summarize(waited).Spread(0))
				}
			}
		}
	}
	w("\nRequests per task are counted until that task's Acquire returned. LIST / GET / PUT are medians over the\n")
	w("repetitions; the latencies are means over all repetitions, measured in the tasks' HTTP clients (on\n")
	w("aws-like, the proxy's delay included). \"Waited a poll\" counts tasks that logged `no node id free, waiting`\n")
	w("and slept P/2..P although an ID was free for each.\n")
	w("\nRatios baseline / spread, from the medians above (same run):\n\n")
	w("| N | network | start | requests | time | server CPU |\n| ---: | --- | --- | ---: | ---: | ---: |\n")
	for _, n := range r.opts.stormSizes() {
		for _, net := range r.opts.netProfiles(n) {
			for _, cold := range []bool{true, false} {
				sp, sq := sums[stormKey{n, net.Name, cold, nodeid.StrategySpread}], sums[stormKey{n, net.Name, cold, nodeid.StrategySequential}]
				rq := bench.Ratio(sq.total.Median, sp.total.Median)
				rt := bench.Ratio(sq.time.Median, sp.time.Median)
				rc := bench.Ratio(sq.cpu.Median, sp.cpu.Median)
				w("| %d | %s | %s | %sx | %sx | %sx |\n", n, net.Name, startName(cold), bench.Format(rq, 1), bench.Format(rt, 1), bench.Format(rc, 1))
				if n == 50 {
					r.verdict(rq >= 5 && rt >= 3, "Storm, N = 50, %s, %s: at least 5x fewer requests and 3x less time than the baseline — measured %sx fewer requests, %sx less time",
						startName(cold), net.Name, bench.Format(rq, 1), bench.Format(rt, 1))
				}
			}
		}
	}
	w("\n")
	r.opCostNote(b)
	waitedCold := 0
	for k, xs := range r.storm {
		if k.Cold && k.Strategy == nodeid.StrategySpread {
			for _, x := range xs {
				waitedCold += x.Waited
			}
		}
	}
	if waitedCold > 0 {
		w("**Cold spread storms waited:** %d tasks in all slept a poll interval (`no node id free, waiting`)\n", waitedCold)
		w("although an ID was free for each; that sleep (P/2..P = 0.5–1 s), not S3, is then most of the cold time.\n\n")
	}
}

// opCostNote explains the loopback ratios with the gateway's CPU time per
// request.
func (r *report) opCostNote(b *strings.Builder) {
	c := r.opCost
	if len(c.CPU) == 0 {
		return
	}
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	list, get := c.CPU["LIST"], c.CPU["GET"]
	w("**Why the loopback ratios are lower.** On loopback the storm's time follows the gateway's CPU, not the\n")
	w("number of round trips, and the requests do not cost it alike. Measured one at a time, %d of each, on a\n", c.Reps)
	w("bootstrapped bucket of %d lease objects (utime + stime of the gateway from `/proc/PID/stat`, 10 ms ticks):\n\n", c.N)
	w("| request | gateway CPU per request (ms) | in GETs |\n| --- | ---: | ---: |\n")
	for _, kind := range opCostKinds {
		name := kind
		if kind == "LIST" {
			name = fmt.Sprintf("LIST (%d objects and the marker)", c.N)
		}
		w("| %s | %s | %s |\n", name, bench.Format(c.CPU[kind], 2), bench.Format(bench.Ratio(c.CPU[kind], get), 1))
	}
	w("\nA LIST costs the gateway about %s GETs. The spread strategy sends far fewer requests, but a larger\n", bench.Format(bench.Ratio(list, get), 1))
	w("share of them are LISTs: one per task at least, and in a cold start one after every create that\n")
	w("another task won; the baseline's requests are nearly all GETs and conditional PUTs. So the server CPU\n")
	w("ratio, and with it the loopback time ratio, is lower than the request ratio. With aws-like latency the\n")
	w("gateway is mostly idle, and the baseline's last task walks about N IDs with a GET and a PUT each.\n\n")
}

func joinInts(xs []int, sep string) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, sep)
}

// stormOps are the operations a storm sends (HEAD only from Probe, which
// the storm does not run).
var stormOps = []string{"LIST", "GET", "PUT"}

func startName(cold bool) string {
	if cold {
		return "cold"
	}
	return "bootstrapped"
}

func (r *report) handoverSection(b *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	var took, rel []time.Duration
	graceful := 0
	for _, x := range r.handover {
		took, rel = append(took, x.Took), append(rel, x.Released)
		if x.Graceful {
			graceful++
		}
	}
	t, rl := secs(took), secs(rel)
	w("## Graceful handover\n\n")
	w("A holder `nodeid-init run -- sleep 1000` and a replacement waiting for the same ID (cluster size 1),\n")
	w("both with the defaults (L = %v, poll %v jittered to [P/2, P]); the holder gets SIGTERM at a random\n", defL, defP)
	w("moment. Times are from the SIGTERM to the JSON log lines' own timestamps.\n\n")
	w("| | median | p90 | min–max |\n| --- | ---: | ---: | ---: |\n")
	w("| SIGTERM → replacement holds the ID (`acquired node id`) | %s s | %s s | %s–%s s |\n", bench.Format(t.Median, 3), bench.Format(t.P90, 3), bench.Format(t.Min, 3), bench.Format(t.Max, 3))
	w("| SIGTERM → holder released it (`released node id`) | %s s | %s s | %s–%s s |\n\n", bench.Format(rl.Median, 3), bench.Format(rl.P90, 3), bench.Format(rl.Min, 3), bench.Format(rl.Max, 3))
	w("The replacement saw a released lease (`previous_graceful=true`, may hard-link the data) in %d of %d repetitions.\n", graceful, len(r.handover))
	w("The remainder after the release is the waiter's poll: it lists again after a random P/2..P.\n\n")
	r.verdict(t.Median <= 1, "Graceful handover: median at most 1 s — measured %s s", bench.Format(t.Median, 3))
}

func (r *report) failoverSection(b *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("## Crash failover\n\n")
	w("As above, but the holder is killed with SIGKILL at a random moment (random against its renewals), with the\n")
	w("lease durations L below (renew L/3, margin L/5, poll %v; L = 5 s keeps the run short, L = 15 s is the\n", defP)
	w("default). The replacement may take over once S3's clock shows the lease unchanged for L + 1 s\n")
	w("(Date - Last-Modified, whole seconds) or it has itself seen the ETag unchanged for L. The time counts from\n")
	w("the kill, which comes up to R after the last renewal, so it can be shorter than L.\n\n")
	w("| L | kill -9 → replacement holds the ID: median | p90 | min–max | target L + 2 s + P | child died with the holder | `previous_graceful=false` |\n")
	w("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, L := range r.opts.failoverLeases {
		reps := r.failover[L]
		if len(reps) == 0 {
			continue
		}
		target := L + 2*time.Second + defP
		var took []time.Duration
		childGone, ungraceful := 0, 0
		for _, x := range reps {
			took = append(took, x.Took)
			if x.ChildGone {
				childGone++
			}
			if !x.Graceful {
				ungraceful++
			}
		}
		t := secs(took)
		w("| %v | %s s | %s s | %s–%s s | %v | %d of %d | %d of %d |\n", L, bench.Format(t.Median, 3), bench.Format(t.P90, 3),
			bench.Format(t.Min, 3), bench.Format(t.Max, 3), target, childGone, len(reps), ungraceful, len(reps))
		r.verdict(t.Max <= target.Seconds(), "Crash failover, L = %v: every repetition at most L + 2 s + P = %v — measured max %s s, median %s s",
			L, target, bench.Format(t.Max, 3), bench.Format(t.Median, 3))
		r.verdict(childGone == len(reps), "Crash failover, L = %v: the holder's child dies with it (Pdeathsig) — %d of %d", L, childGone, len(reps))
	}
	w("\n")
}

func (r *report) lossSection(b *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("## Loss detection\n\n")
	if len(r.overwrite) > 0 {
		var lost, fenced []time.Duration
		code3, childGone := 0, 0
		for _, x := range r.overwrite {
			lost, fenced = append(lost, x.Lost), append(fenced, x.Fenced)
			if x.ExitCode == nodeid.ExitCodeLeaseLost {
				code3++
			}
			if x.ChildGone {
				childGone++
			}
		}
		l, f := secs(lost), secs(fenced)
		target := defR + time.Second
		w("**Outside overwrite.** A holder `nodeid-init run -- sleep 1000` with the defaults (R = %v); at a random\n", defR)
		w("moment another writer replaces its lease object (a conditional PUT with the ETag it read, another task\n")
		w("ID, version + 1). Times from the moment that PUT was sent.\n\n")
		w("| | median | p90 | min–max | target |\n| --- | ---: | ---: | ---: | ---: |\n")
		w("| overwrite → holder logs `lease lost` | %s s | %s s | %s–%s s | |\n", bench.Format(l.Median, 3), bench.Format(l.P90, 3), bench.Format(l.Min, 3), bench.Format(l.Max, 3))
		w("| overwrite → child killed and holder exited | %s s | %s s | %s–%s s | ≤ %v (R + 1 s) |\n\n", bench.Format(f.Median, 3), bench.Format(f.P90, 3), bench.Format(f.Min, 3), bench.Format(f.Max, 3), target)
		w("Exit code 3 in %d of %d repetitions; the child was gone afterwards in %d of %d.\n", code3, len(r.overwrite), childGone, len(r.overwrite))
		w("The detection time is the wait for the next renewal, uniform in [0, R], plus one PUT (412) and one GET.\n\n")
		r.verdict(f.Max <= target.Seconds() && code3 == len(r.overwrite), "Overwrite: fenced (exit 3) within R + 1 s = %v in every repetition — measured max %s s, exit 3 in %d of %d",
			target, bench.Format(f.Max, 3), code3, len(r.overwrite))
	}
	if len(r.blackhole) > 0 {
		w("**S3 blackhole.** The holder talks to S3 through a `faultproxy` that, at a random moment, holds every\n")
		w("request unanswered (`Fault{Blackhole: true}`); the replacement talks to S3 directly and waits. All times\n")
		w("are from *s*, the arrival at the proxy of the holder's last renewal before the blackhole (sampled every 5 ms).\n")
		w("With L = %v and m = %v the holder must stop by s + L - m = s + %v; nobody may take the ID before\n", defL, defM, defL-defM)
		w("s + L = s + %v.\n\n", defL)
		w("| rep | holder fenced (exited, code) | replacement holds the ID | margin | reason logged |\n| ---: | ---: | ---: | ---: | --- |\n")
		var fenced, takeover []time.Duration
		ok := 0
		for i, x := range r.blackhole {
			fenced, takeover = append(fenced, x.Fenced), append(takeover, x.Takeover)
			margin := x.Takeover - x.Fenced
			if x.Fenced < defL && margin > 0 && x.ExitCode == nodeid.ExitCodeLeaseLost {
				ok++
			}
			w("| %d | s + %.3f s (%d) | s + %.3f s | %.3f s | %s |\n", i+1, x.Fenced.Seconds(), x.ExitCode, x.Takeover.Seconds(), margin.Seconds(), x.Reason)
		}
		f, t := secs(fenced), secs(takeover)
		w("| median | s + %s s | s + %s s | %s s | |\n\n", bench.Format(f.Median, 3), bench.Format(t.Median, 3), bench.Format(t.Median-f.Median, 3))
		r.verdict(ok == len(r.blackhole), "Blackhole: the holder is fenced before s + L (its lease could not yet expire for others) and before the replacement takes over, in every repetition — %d of %d; fenced at most s + %s s, taken over at least s + %s s",
			ok, len(r.blackhole), bench.Format(f.Max, 3), bench.Format(t.Min, 3))
	}
}

func (r *report) idleSection(b *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	k := len(r.idle)
	perHour := func(op string) bench.Summary {
		var xs []float64
		for _, x := range r.idle {
			xs = append(xs, float64(x.ByOp[op])*3600/x.Window.Seconds())
		}
		return bench.Summarize(xs)
	}
	ops := map[string]bool{}
	for _, x := range r.idle {
		for op := range x.ByOp {
			ops[op] = true
		}
	}
	names := make([]string, 0, len(ops))
	for op := range ops {
		names = append(names, op)
	}
	slices.Sort(names)

	w("## Steady state\n\n")
	w("%d idle `nodeid-init run -- sleep 1000` of one cluster of size %d, with the defaults (L = %v, R = %v,\n", k, k, defL, defR)
	w("mappings refresh every L, jittered ±20 %%), each behind its own `faultproxy` in Pass mode and a counting\n")
	w("proxy that tells LIST from GET, measured over %v once every node held its ID; per node, extrapolated to an hour.\n\n", r.idle[0].Window.Round(time.Second))
	w("| operation | measured per node-hour | expected per node-hour |\n| --- | ---: | ---: |\n")
	expected := map[string]float64{
		"PUT":  3600 / defR.Seconds(),
		"LIST": 3600 / defL.Seconds(),
		"GET":  3600 / defL.Seconds(), // one verification read per refresh (issue 25)
	}
	var measuredCost float64
	for _, op := range names {
		s := perHour(op)
		e := "—"
		if x, ok := expected[op]; ok {
			e = bench.Format(x, 0)
		}
		w("| %s | %s | %s |\n", op, s.Spread(0), e)
		price := priceGET
		if op == "PUT" || op == "LIST" || op == "POST" {
			price = pricePUT
		}
		measuredCost += s.Median * hoursMonth / 1000 * price
	}
	w("\nExpected: one renewal PUT every R; every L one LIST (leases and tenure objects in one page) and one GET of\n")
	w("the peer read least recently, whatever the number of peers (%d here; before issue 25 one GET per peer). A window of %v\n", k-1, r.idle[0].Window.Round(time.Second))
	w("holds a whole number of refreshes (every L, jittered ±20 %%), so the measured LIST and GET rates move in\n")
	w("steps of %s per hour; the price table below uses the expected rates.\n\n", bench.Format(3600/r.idle[0].Window.Seconds(), 0))
	w("List price per node and month (%d h, us-east-1: PUT/LIST $%.3f, GET $%.4f per 1,000):\n\n", hoursMonth, pricePUT, priceGET)
	w("| cluster size | PUT | LIST | GET | total |\n| ---: | ---: | ---: | ---: | ---: |\n")
	for _, n := range []int{1, 3, 5, 10} {
		put := 3600 / defR.Seconds() * hoursMonth / 1000 * pricePUT
		list := 3600 / defL.Seconds() * hoursMonth / 1000 * pricePUT
		get := float64(min(n-1, 1)) * 3600 / defL.Seconds() * hoursMonth / 1000 * priceGET
		w("| %d (from R = L/3 = %v) | $%.2f | $%.2f | $%.2f | **$%.2f** |\n", n, defR, put, list, get, put+list+get)
	}
	w("| %d (measured, medians) | | | | **$%.2f** |\n\n", k, measuredCost)
	w("A waiting task (all IDs held) adds one LIST per P/2..P: about %s LISTs an hour, $%.2f a month.\n\n",
		bench.Format(3600/(0.75*defP.Seconds()), 0), 3600/(0.75*defP.Seconds())*hoursMonth/1000*pricePUT)

	var rss, hwm, cpu []float64
	for _, x := range r.idle {
		rss = append(rss, x.RSSKiB...)
		hwm = append(hwm, x.HWMKiB)
		cpu = append(cpu, 100*x.CPU)
	}
	rs, hs, cs := bench.Summarize(rss), bench.Summarize(hwm), bench.Summarize(cpu)
	w("Resources of `nodeid-init` itself (not its child), from `/proc/PID/status` (VmRSS sampled every second,\n")
	w("VmHWM at the end) and `/proc/PID/stat` (utime + stime over the window, %d ticks per second):\n\n", clockTicks)
	w("| | median | min–max | target |\n| --- | ---: | ---: | ---: |\n")
	w("| RSS (MiB) | %s | %s–%s | < 30 |\n", bench.Format(rs.Median/1024, 1), bench.Format(rs.Min/1024, 1), bench.Format(rs.Max/1024, 1))
	w("| peak RSS, VmHWM (MiB) | %s | %s–%s | |\n", bench.Format(hs.Median/1024, 1), bench.Format(hs.Min/1024, 1), bench.Format(hs.Max/1024, 1))
	w("| CPU (%% of one core) | %s | %s–%s | < 0.1 |\n\n", bench.Format(cs.Median, 3), bench.Format(cs.Min, 3), bench.Format(cs.Max, 3))
	r.verdict(hs.Max/1024 < 30, "Idle RSS under 30 MiB — measured peak %s MiB", bench.Format(hs.Max/1024, 1))
	r.verdict(cs.Max < 0.1, "Idle CPU under 0.1%% of a core — measured median %s %%, max %s %%", bench.Format(cs.Median, 3), bench.Format(cs.Max, 3))
}

func (r *report) datadirSection(b *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("## Data directory preparation\n\n")
	w("Measured separately by `make bench-datadir` (`scripts/bench-datadir.sh`: `datadir.Prepare` against `cp -a`\n")
	w("on 10,000 small files and on 16 large ones, copy and hard-link modes); method and discussion in\n")
	w("[datadir.md](datadir.md#performance).\n\n")
	w("%s\n", r.datadir)
}

// datadirFigures runs the datadir benchmark when asked to, else quotes
// the figures docs/datadir.md records.
func datadirFigures(ctx context.Context, mb int) string {
	if mb > 0 {
		progress("datadir: scripts/bench-datadir.sh with BENCH_DATADIR_MB=%d", mb)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cctx, "bash", "scripts/bench-datadir.sh")
		cmd.Env = append(os.Environ(), fmt.Sprintf("BENCH_DATADIR_MB=%d", mb))
		out, err := cmd.Output()
		if err != nil {
			return fmt.Sprintf("Running `BENCH_DATADIR_MB=%d bash scripts/bench-datadir.sh` failed: %v.\n", mb, err)
		}
		return fmt.Sprintf("This run, `BENCH_DATADIR_MB=%d bash scripts/bench-datadir.sh`:\n\n```\n%s```\n", mb, out)
	}
	doc, err := os.ReadFile("docs/datadir.md")
	if err != nil {
		return "docs/datadir.md is not there yet; no figures to quote.\n"
	}
	_, perf, ok := strings.Cut(string(doc), "## Performance")
	if !ok {
		return "docs/datadir.md has no Performance section yet.\n"
	}
	if i := strings.Index(perf, "\n## "); i >= 0 {
		perf = perf[:i]
	}
	if strings.Contains(perf, "RESULTS_PLACEHOLDER") {
		return "docs/datadir.md does not record figures yet (the section still holds a placeholder); run `make bench-datadir`.\n"
	}
	// Quote what was measured: the "Measured on" line and the tables or
	// code blocks after it.
	var quoted []string
	in := false
	for _, line := range strings.Split(perf, "\n") {
		if strings.HasPrefix(line, "Measured on") {
			in = true
		}
		if in && strings.HasPrefix(line, "Observations") {
			break
		}
		if in {
			quoted = append(quoted, line)
		}
	}
	if len(quoted) == 0 {
		return "See docs/datadir.md for the figures.\n"
	}
	return "From docs/datadir.md:\n\n" + strings.TrimSpace(strings.Join(quoted, "\n")) + "\n"
}

func (r *report) efsHandoverSection(b *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("## Graceful handover with a data directory on EFS\n\n")
	if r.efsSkipped != "" {
		w("Not run: %s (it needs root and /dev/fuse).\n\n", r.efsSkipped)
		return
	}
	var took, prep []time.Duration
	for _, x := range r.efsHandover {
		took, prep = append(took, x.Took), append(prep, x.Prepare)
	}
	t, p := secs(took), secs(prep)
	w("As above, with `NODEID_DATA_ROOT` on an EFS-like FUSE mount (`internal/efsfs`: %v per metadata operation\n", efsfs.EFS.Meta)
	w("and per fsync, %v per read or write, names and attributes cached %v) and the holder's data directory\n", efsfs.EFS.Data, efsfs.EFS.Cache)
	w("filled with %d files of 4 KiB in %d directories before its SIGTERM; the replacement hard-links them\n", efsFilesDefault, efsFilesDefault/100)
	w("(graceful predecessor) with the default %d data workers. Times are from the SIGTERM to the replacement's\n", 32)
	w("`command started` (its broker running). Alone: `make bench-efs-handover`.\n\n")
	w("| | median | p90 | min–max |\n| --- | ---: | ---: | ---: |\n")
	w("| SIGTERM → replacement's broker running | %s s | %s s | %s–%s s |\n", bench.Format(t.Median, 3), bench.Format(t.P90, 3), bench.Format(t.Min, 3), bench.Format(t.Max, 3))
	w("| of which its preparation (`acquired node id` → datadir's `prepared`) | %s s | %s s | %s–%s s |\n\n", bench.Format(p.Median, 3), bench.Format(p.P90, 3), bench.Format(p.Min, 3), bench.Format(p.Max, 3))
	w("Before issue 18 (one file at a time): 49.7 s on this mount (one run), 67.9 s as measured in the issue.\n\n")
	r.verdict(t.Median <= 5, "Graceful handover with 10,000 files on the EFS-like mount: median at most 5 s — measured %s s", bench.Format(t.Median, 3))
}
