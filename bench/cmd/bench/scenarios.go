package main

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nodeid/nodeid/internal/faultproxy"
	"github.com/nodeid/nodeid/nodeid"
)

// prefix of the lease objects of the process-level scenarios.
const prefix = "bench/"

// procBench runs nodeid-init processes against the gateway.
type procBench struct {
	g   *gateway
	bin string // nodeid-init
	tmp string // TMPDIR of the processes: lease files
	seq int
}

// env is the environment of one nodeid-init task: the CLI's documented
// variables only, endpoint on loopback, JSON logs for the watcher.
func (b *procBench) env(bucket, endpoint string, size int, extra ...string) []string {
	b.seq++
	env := append(cleanEnv(),
		"TMPDIR="+b.tmp,
		"AWS_ACCESS_KEY_ID="+b.g.AccessKey, "AWS_SECRET_ACCESS_KEY="+b.g.SecretKey, "AWS_REGION="+region,
		"AWS_ENDPOINT_URL_S3="+endpoint,
		"NODEID_BUCKET="+bucket, "NODEID_PREFIX="+prefix, "NODEID_S3_PATH_STYLE=true",
		"NODEID_CLUSTER_SIZE="+strconv.Itoa(size),
		"NODEID_LOG_FORMAT=json",
		fmt.Sprintf("NODEID_TASK_ID=bench-task-%d-%s", b.seq, randHex(4)),
	)
	return append(env, extra...)
}

// run starts `nodeid-init run -- sleep 1000`: an idle broker stand-in.
func (b *procBench) run(name string, env []string) (*proc, error) {
	return startProc(name, b.bin, env, "run", "--", "sleep", "1000")
}

// holderAndWaiter starts a holder and, once its command runs, a replacement
// that waits for the same single ID.
func (b *procBench) holderAndWaiter(ctx context.Context, what, holderEndpoint string, extra ...string) (bucket string, holder, waiter *proc, err error) {
	bucket, err = b.g.newBucket(ctx, what)
	if err != nil {
		return "", nil, nil, err
	}
	holder, err = b.run("holder", b.env(bucket, holderEndpoint, 1, extra...))
	if err != nil {
		return "", nil, nil, err
	}
	if _, err = holder.waitLog("command started", time.Time{}, 30*time.Second); err != nil {
		holder.stop()
		return "", nil, nil, err
	}
	waiter, err = b.run("replacement", b.env(bucket, b.g.URL, 1, extra...))
	if err != nil {
		holder.stop()
		return "", nil, nil, err
	}
	if _, err = waiter.waitLog("no node id free, waiting", time.Time{}, 30*time.Second); err != nil {
		holder.stop()
		waiter.stop()
		return "", nil, nil, err
	}
	return bucket, holder, waiter, nil
}

// handoverRep is one graceful handover.
type handoverRep struct {
	Took     time.Duration // SIGTERM to the holder -> replacement logs "acquired node id"
	Released time.Duration // SIGTERM -> holder logs "released node id"
	Graceful bool          // the replacement saw a released lease
}

func (b *procBench) handover(ctx context.Context) (handoverRep, error) {
	_, holder, waiter, err := b.holderAndWaiter(ctx, "handover", b.g.URL)
	if err != nil {
		return handoverRep{}, err
	}
	defer holder.stop()
	defer waiter.stop()
	// A random phase against the waiter's poll, so the repetitions sample
	// the whole poll interval instead of one point of it.
	time.Sleep(randDuration(time.Second))
	t0 := time.Now()
	holder.cmd.Process.Signal(syscall.SIGTERM)
	acq, err := waiter.waitLog("acquired node id", t0, 60*time.Second)
	if err != nil {
		return handoverRep{}, err
	}
	rel, err := holder.waitLog("released node id", t0, 30*time.Second)
	if err != nil {
		return handoverRep{}, err
	}
	if code, _, err := holder.wait(30 * time.Second); err != nil || code != 0 {
		return handoverRep{}, fmt.Errorf("holder exit code %d after SIGTERM (%v)", code, err)
	}
	g, _ := acq.Fields["previous_graceful"].(bool)
	return handoverRep{Took: acq.Time.Sub(t0), Released: rel.Time.Sub(t0), Graceful: g}, nil
}

// failoverRep is one crash failover.
type failoverRep struct {
	Took      time.Duration // kill -9 of the holder -> replacement logs "acquired node id"
	ChildGone bool          // the holder's child died with it (Pdeathsig)
	Graceful  bool
}

func (b *procBench) failover(ctx context.Context, lease time.Duration) (failoverRep, error) {
	l := "NODEID_LEASE_DURATION=" + lease.String()
	_, holder, waiter, err := b.holderAndWaiter(ctx, "failover", b.g.URL, l)
	if err != nil {
		return failoverRep{}, err
	}
	defer holder.stop()
	defer waiter.stop()
	child := holder.childPID()
	time.Sleep(randDuration(lease / 3)) // random phase against the renewals
	t0 := time.Now()
	holder.cmd.Process.Kill()
	var rep failoverRep
	rep.ChildGone = child > 0 && gone(child, 2*time.Second)
	acq, err := waiter.waitLog("acquired node id", t0, lease+60*time.Second)
	if err != nil {
		return rep, err
	}
	rep.Took = acq.Time.Sub(t0)
	rep.Graceful, _ = acq.Fields["previous_graceful"].(bool)
	return rep, nil
}

// overwriteRep is one outside overwrite of a held lease.
type overwriteRep struct {
	Lost      time.Duration // overwrite sent -> holder logs "lease lost"
	Fenced    time.Duration // overwrite sent -> holder exited (its child killed first)
	ExitCode  int
	ChildGone bool
}

func (b *procBench) overwrite(ctx context.Context) (overwriteRep, error) {
	bucket, err := b.g.newBucket(ctx, "overwrite")
	if err != nil {
		return overwriteRep{}, err
	}
	holder, err := b.run("holder", b.env(bucket, b.g.URL, 1))
	if err != nil {
		return overwriteRep{}, err
	}
	defer holder.stop()
	if _, err := holder.waitLog("command started", time.Time{}, 30*time.Second); err != nil {
		return overwriteRep{}, err
	}
	child := holder.childPID()
	time.Sleep(randDuration(nodeid.DefaultLeaseDuration / 3)) // random phase against the renewals

	repo, err := nodeid.NewS3Repository(b.g.client, bucket, prefix, 0)
	if err != nil {
		return overwriteRep{}, err
	}
	rec, err := repo.Get(ctx, 0)
	if err != nil {
		return overwriteRep{}, err
	}
	intruder := nodeid.Lease{
		TaskID:     "bench-intruder",
		Instance:   nodeid.NodeInstance{ID: 0, Version: rec.Lease.Instance.Version + 1},
		Expires:    time.Now().Add(nodeid.DefaultLeaseDuration),
		Duration:   nodeid.DefaultLeaseDuration,
		Nonce:      randHex(16),
		Acquirable: true,
	}
	t0 := time.Now()
	if _, err := repo.Write(ctx, intruder, rec.ETag); err != nil {
		// The holder renewed between our read and write: rare; retry once
		// with a fresh read.
		if rec, err = repo.Get(ctx, 0); err != nil {
			return overwriteRep{}, err
		}
		t0 = time.Now()
		if _, err := repo.Write(ctx, intruder, rec.ETag); err != nil {
			return overwriteRep{}, fmt.Errorf("overwrite: %w", err)
		}
	}
	lost, code, exited, err := holder.waitLoss(t0)
	if err != nil {
		return overwriteRep{}, err
	}
	return overwriteRep{
		Lost:      lost.Time.Sub(t0),
		Fenced:    exited.Sub(t0),
		ExitCode:  code,
		ChildGone: child > 0 && gone(child, time.Second),
	}, nil
}

// blackholeRep is one S3 blackhole in front of the holder only.
type blackholeRep struct {
	// All from LastRenewal: the arrival at the proxy of the holder's last
	// renewal PUT before the blackhole, which is when it was sent, give or
	// take the loopback hop and the 5 ms sampling of the proxy's counters.
	Fenced   time.Duration // -> holder exited (code 3)
	Lost     time.Duration // -> holder logged "lease lost"
	Takeover time.Duration // -> replacement logged "acquired node id"
	ExitCode int
	Reason   string
}

func (b *procBench) blackhole(ctx context.Context) (blackholeRep, error) {
	fp, err := faultproxy.Start(b.g.URL)
	if err != nil {
		return blackholeRep{}, err
	}
	defer fp.Close()
	_, holder, waiter, err := b.holderAndWaiter(ctx, "blackhole", fp.URL)
	if err != nil {
		return blackholeRep{}, err
	}
	defer holder.stop()
	defer waiter.stop()

	// Watch PUT arrivals at the proxy: the last one before the blackhole
	// is the holder's last successful renewal.
	var mu sync.Mutex
	var puts []time.Time
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		last := fp.Stats().ByMethod["PUT"]
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if n := fp.Stats().ByMethod["PUT"]; n != last {
				last = n
				mu.Lock()
				puts = append(puts, time.Now())
				mu.Unlock()
			}
		}
	}()
	time.Sleep(randDuration(nodeid.DefaultLeaseDuration/3) + nodeid.DefaultLeaseDuration/3) // at least one renewal seen
	tb := time.Now()
	fp.Set(faultproxy.Fault{Blackhole: true})
	close(stop)
	wg.Wait()
	var s time.Time
	for _, t := range puts {
		if t.Before(tb) {
			s = t
		}
	}
	if s.IsZero() {
		return blackholeRep{}, errors.New("no renewal seen before the blackhole")
	}

	lost, code, exited, err := holder.waitLoss(tb)
	if err != nil {
		return blackholeRep{}, err
	}
	acq, err := waiter.waitLog("acquired node id", tb, 60*time.Second)
	if err != nil {
		return blackholeRep{}, err
	}
	reason, _ := lost.Fields["reason"].(string)
	return blackholeRep{
		Fenced:   exited.Sub(s),
		Lost:     lost.Time.Sub(s),
		Takeover: acq.Time.Sub(s),
		ExitCode: code,
		Reason:   reason,
	}, nil
}

// idleRep is one idle `nodeid-init run` over the steady-state window.
type idleRep struct {
	Window   time.Duration
	ByOp     map[string]int // LIST, GET, PUT, ... by the counting proxy
	Requests int            // all requests, by the fault proxy
	RSSKiB   []float64      // VmRSS samples over the window
	HWMKiB   float64        // VmHWM at the end
	CPU      float64        // fraction of one core over the window
}

// idle runs k nodes of one cluster of size k, each behind its own proxy in
// Pass mode that counts its requests, and measures them over window once
// every node holds its ID.
func (b *procBench) idle(ctx context.Context, k int, window time.Duration) ([]idleRep, error) {
	bucket, err := b.g.newBucket(ctx, "idle")
	if err != nil {
		return nil, err
	}
	var nodes []*proc
	var proxies []*faultproxy.Proxy
	var counters []*opCounter
	defer func() {
		for _, n := range nodes {
			n.stop()
		}
		for _, c := range counters {
			c.close()
		}
		for _, p := range proxies {
			p.Close()
		}
	}()
	for i := range k {
		fp, err := faultproxy.Start(b.g.URL)
		if err != nil {
			return nil, err
		}
		proxies = append(proxies, fp)
		oc, err := startCounter(fp.URL)
		if err != nil {
			return nil, err
		}
		counters = append(counters, oc)
		n, err := b.run(fmt.Sprintf("idle-%d", i), b.env(bucket, oc.URL, k))
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		if _, err := n.waitLog("command started", time.Time{}, 60*time.Second); err != nil {
			return nil, err
		}
	}
	// Let start-up traffic (probe, bootstrap, acquisition) finish.
	time.Sleep(time.Second)

	reps := make([]idleRep, k)
	cpu0 := make([]float64, k)
	for i, n := range nodes {
		proxies[i].ResetStats()
		counters[i].reset()
		cpu0[i], _ = cpuSeconds(n.cmd.Process.Pid)
	}
	w0 := time.Now()
	for time.Since(w0) < window {
		for i, n := range nodes {
			if rss, _, err := memKiB(n.cmd.Process.Pid); err == nil {
				reps[i].RSSKiB = append(reps[i].RSSKiB, rss)
			}
		}
		select {
		case <-time.After(min(time.Second, window-time.Since(w0))):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	elapsed := time.Since(w0)
	for i, n := range nodes {
		if n.isExited() {
			return nil, fmt.Errorf("%s exited during the window:\n%s", n.name, n.tail(10))
		}
		cpu1, err := cpuSeconds(n.cmd.Process.Pid)
		if err != nil {
			return nil, err
		}
		st := proxies[i].Stats()
		_, hwm, _ := memKiB(n.cmd.Process.Pid)
		reps[i].Window, reps[i].ByOp, reps[i].Requests = elapsed, counters[i].snapshot(), st.Requests
		reps[i].HWMKiB = hwm
		reps[i].CPU = (cpu1 - cpu0[i]) / elapsed.Seconds()
	}
	return reps, nil
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat; it
// is 100 on every Linux architecture Go supports.
const clockTicks = 100

// cpuSeconds reads utime + stime of pid (its threads included, not its
// children: the idle `sleep` is not nodeid-init's cost).
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("bad /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state); utime is field 14
	if len(f) < 13 {
		return 0, fmt.Errorf("bad /proc/%d/stat", pid)
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return (ut + st) / clockTicks, nil
}

// memKiB reads VmRSS and VmHWM of pid.
func memKiB(pid int) (rss, hwm float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		x, _ := strconv.ParseFloat(f[0], 64)
		switch k {
		case "VmRSS":
			rss = x
		case "VmHWM":
			hwm = x
		}
	}
	return rss, hwm, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	cryptorand.Read(b)
	return hex.EncodeToString(b)
}

func randDuration(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}
