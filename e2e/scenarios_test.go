package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/faultproxy"
	"github.com/nodeid/nodeid/internal/poll"
)

// system is a real clustered store, checked with its own clients.
type system interface {
	// healthy returns nil when member id serves requests as part of the
	// quorum.
	healthy(ctx context.Context, id int) error
	// put writes the keys through member id.
	put(ctx context.Context, id int, kvs []kv) error
	// get returns every key below dir with its value, as member id's own
	// store holds them (a local read, not through the quorum).
	get(ctx context.Context, id int, dir string) (map[string]string, error)
	// identity is the cluster's own list of its members; it must not
	// change when a member moves to another task.
	identity(ctx context.Context) (string, error)
	// writer writes a key below dir every interval until stopped.
	writer(ctx context.Context, dir string) *writer
}

type kv struct{ key, value string }

const (
	bootKeys = 1000
	keysDir  = "/e2e/keys"
	afterDir = "/e2e/after"
	rollDir  = "/e2e/roll"
)

func keyName(i int) string { return fmt.Sprintf("k%04d", i) }
func valueOf(k string) string {
	return "val-" + strings.ReplaceAll(strings.TrimPrefix(k, "/"), "/", "-")
}

// writer is a client writing one key at a time; acks are the keys the
// system confirmed, with when.
type writer struct {
	stop func()
	done chan struct{}

	mu     sync.Mutex
	end    time.Time
	acks   []time.Time
	keys   []string
	failed int
}

func (wr *writer) ack(k string) {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	wr.acks, wr.keys = append(wr.acks, time.Now()), append(wr.keys, k)
}

func (wr *writer) confirmed() int {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	return len(wr.acks)
}

// maxGap is the longest time without a confirmed write, from the first
// confirmed write (the client's own start-up is not the cluster's) to the
// end.
func (wr *writer) maxGap() time.Duration {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	if len(wr.acks) == 0 {
		return 0
	}
	last, gap := wr.acks[0], time.Duration(0)
	for _, at := range append(append([]time.Time(nil), wr.acks[1:]...), wr.end) {
		gap = max(gap, at.Sub(last))
		last = at
	}
	return gap
}

func (wr *writer) finish() {
	wr.stop()
	<-wr.done
}

// row is one line of the recovery table.
type row struct {
	scenario string
	member   int
	versions string
	data     string
	gone     time.Duration // fault to the old member's process gone
	healthy  time.Duration // fault to the member serving again
	keys     int
}

// suite runs the scenarios of issue 27 on one system.
type suite struct {
	top    *testing.T
	t      *testing.T
	w      *world
	sys    system
	ident  string
	after  []kv
	rolled []string
	rows   []row
}

func runScenarios(t *testing.T, w *world, sys system) {
	s := &suite{top: t, t: t, w: w, sys: sys}
	defer s.report()
	steps := []struct {
		name string
		f    func(t *testing.T)
	}{
		{"1_bootstrap", s.bootstrap},
		{"2_crash", s.crash},
		{"3_rolling_deploy", s.rolling},
		{"4_lease_overwrite", s.overwrite},
		{"5_s3_blackhole", s.blackhole},
	}
	for _, st := range steps {
		ok := t.Run(st.name, func(t *testing.T) { s.t, w.t = t, t; st.f(t) })
		s.t, w.t = t, t
		if !ok {
			return
		}
	}
}

func (s *suite) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.t.Context(), 2*time.Minute)
}

// waitHealthy waits until member id serves.
func (s *suite) waitHealthy(id int, timeout time.Duration) {
	s.t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	var last error
	if err := poll.Until(ctx, timeout, 200*time.Millisecond, fmt.Sprintf("member %d healthy", id), func() bool {
		last = s.sys.healthy(ctx, id)
		return last == nil
	}); err != nil {
		s.t.Fatalf("%v; last answer: %v", err, last)
	}
}

// check reads every key back from member id's own store: the 1,000 of the
// bootstrap (exactly those, with their values), the writes after each
// scenario, the writes the rolling deploy's client had confirmed. It
// returns how many it checked. A member may apply the latest writes a
// moment after the quorum: it reads again, up to three times.
func (s *suite) check(id int) int {
	s.t.Helper()
	var problems []string
	for attempt := range 3 {
		if attempt > 0 {
			time.Sleep(time.Second)
		}
		var n int
		if n, problems = s.verify(id); len(problems) == 0 {
			return n
		}
	}
	if len(problems) > 5 {
		problems = append(problems[:5], fmt.Sprintf("and %d more", len(problems)-5))
	}
	s.t.Fatalf("member %d: %s", id, strings.Join(problems, "; "))
	return 0
}

func (s *suite) verify(id int) (int, []string) {
	ctx, cancel := s.ctx()
	defer cancel()
	var problems []string
	n := 0
	read := func(dir string) map[string]string {
		got, err := s.sys.get(ctx, id, dir)
		if err != nil {
			problems = append(problems, fmt.Sprintf("read %s: %v", dir, err))
		}
		return got
	}
	got := read(keysDir)
	if len(got) != bootKeys {
		problems = append(problems, fmt.Sprintf("%s holds %d keys, want %d", keysDir, len(got), bootKeys))
	}
	for i := range bootKeys {
		k := keysDir + "/" + keyName(i)
		if got[k] != valueOf(k) {
			problems = append(problems, fmt.Sprintf("%s = %q, want %q", k, got[k], valueOf(k)))
		}
		n++
	}
	after := read(afterDir)
	for _, e := range s.after {
		if after[e.key] != e.value {
			problems = append(problems, fmt.Sprintf("%s = %q, want %q", e.key, after[e.key], e.value))
		}
		n++
	}
	if len(s.rolled) > 0 {
		rolled := read(rollDir)
		for _, k := range s.rolled {
			if rolled[k] != valueOf(k) {
				problems = append(problems, fmt.Sprintf("confirmed write %s lost: %q", k, rolled[k]))
			}
			n++
		}
	}
	return n, problems
}

// writeAfter writes one key through member id: writes go on.
func (s *suite) writeAfter(id int) {
	s.t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	k := fmt.Sprintf("%s/%s-%d", afterDir, strings.SplitN(s.t.Name(), "/", 2)[1], id)
	e := kv{k, valueOf(k)}
	if err := s.sys.put(ctx, id, []kv{e}); err != nil {
		s.t.Fatalf("write through member %d after the scenario: %v", id, err)
	}
	s.after = append(s.after, e)
}

func (s *suite) sameIdentity() {
	s.t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	var got string
	var err error
	s.w.waitFor(30*time.Second, "the cluster's member list as at bootstrap", func() bool {
		got, err = s.sys.identity(ctx)
		return err == nil && got == s.ident
	})
}

func (s *suite) bootstrap(t *testing.T) {
	t0 := time.Now()
	for range clusterSize {
		s.w.start()
	}
	for id := range clusterSize {
		if te, _ := s.w.holder(id).tenure(); te.version != 1 || te.prepared.FromVersion != nil {
			t.Errorf("node %d starts at version %d, data %s; want version 1 from an empty directory (no from_version)", id, te.version, dataNote(te))
		}
	}
	s.w.spare()
	for id := range clusterSize {
		s.waitHealthy(id, 90*time.Second)
	}
	healthy := time.Since(t0)
	ctx, cancel := s.ctx()
	defer cancel()
	var keys []kv
	for i := range bootKeys {
		k := keysDir + "/" + keyName(i)
		keys = append(keys, kv{k, valueOf(k)})
	}
	if err := s.sys.put(ctx, 0, keys); err != nil {
		t.Fatalf("write %d keys: %v", bootKeys, err)
	}
	var err error
	if perr := poll.Until(ctx, 30*time.Second, 200*time.Millisecond, "the cluster's member list", func() bool {
		s.ident, err = s.sys.identity(ctx)
		return err == nil
	}); perr != nil {
		t.Fatalf("%v: %v", perr, err)
	}
	t.Logf("members: %s", s.ident)
	s.rows = append(s.rows, row{scenario: "1 bootstrap", member: -1, versions: "v1 x3", data: "empty", healthy: healthy, keys: s.check(0)})
}

// dataNote says how the successor's data directory was made.
func dataNote(te tenure) string {
	p := te.prepared
	from := "empty"
	if p.FromVersion != nil {
		from = fmt.Sprintf("v%d", *p.FromVersion)
	}
	return fmt.Sprintf("from %s: %d copied (%d MB), %d linked", from, p.FilesCopied, p.BytesCopied>>20, p.FilesLinked)
}

// successor checks the successor's tenure: version + 1, the data directory
// copied after a crash or hard-linked after a release.
func (s *suite) successor(te, ste tenure, graceful bool) {
	s.t.Helper()
	if ste.version != te.version+1 {
		s.t.Errorf("successor has version %d, want %d", ste.version, te.version+1)
	}
	if ste.graceful != graceful {
		s.t.Errorf("successor saw previous_graceful=%v, want %v", ste.graceful, graceful)
	}
	p := ste.prepared
	if p.FromVersion == nil || *p.FromVersion != te.version {
		s.t.Errorf("data directory prepared %s, want from v%d", dataNote(ste), te.version)
	}
	switch {
	case graceful && (p.FilesLinked == 0 || p.FilesCopied != 0):
		s.t.Errorf("after a release: %d files linked, %d copied; want all linked", p.FilesLinked, p.FilesCopied)
	case !graceful && (p.FilesCopied == 0 || p.FilesLinked != 0):
		s.t.Errorf("after a takeover: %d files copied, %d linked; want all copied", p.FilesCopied, p.FilesLinked)
	}
}

// memberPID returns the pid of the one process running as member id.
func (s *suite) memberPID(id int) int {
	s.t.Helper()
	pids := s.w.members()[id]
	if len(pids) != 1 {
		s.t.Fatalf("processes running as member %d: %v, want one", id, pids)
	}
	return pids[0]
}

// memberGone waits until process pid (member id) is gone and returns when,
// from t0.
func (s *suite) memberGone(id, pid int, t0 time.Time, timeout time.Duration) time.Duration {
	s.t.Helper()
	var at time.Time
	s.w.waitFor(timeout, fmt.Sprintf("member %d's process %d gone", id, pid), func() bool {
		at = time.Now()
		return !slices.Contains(s.w.members()[id], pid)
	})
	return at.Sub(t0)
}

func (s *suite) crash(t *testing.T) {
	const id = 1
	old := s.w.holder(id)
	te, _ := old.tenure()
	pid := s.memberPID(id)
	t0 := time.Now()
	if err := old.cmd.Process.Kill(); err != nil { // kill -9 of the supervisor
		t.Fatal(err)
	}
	gone := s.memberGone(id, pid, t0, 5*time.Second) // PDEATHSIG: the member dies with it
	succ, ste := s.w.takeover(old, id, te.version, 60*time.Second)
	s.successor(te, ste, false)
	s.waitHealthy(id, 90*time.Second)
	healthy := time.Since(t0)
	t.Logf("%s (v%d) killed; %s took node %d v%d; member gone after %v, healthy after %v",
		old.name, te.version, succ.name, id, ste.version, gone.Round(time.Millisecond), healthy.Round(time.Millisecond))
	s.sameIdentity()
	s.writeAfter(id)
	s.rows = append(s.rows, row{"2 crash (kill -9)", id, fmt.Sprintf("v%d->v%d", te.version, ste.version), dataNote(ste), gone, healthy, s.check(id)})
	s.w.spare() // ECS replaces the task: the next spare
}

func (s *suite) rolling(t *testing.T) {
	ctx, cancel := s.ctx()
	defer cancel()
	wr := s.sys.writer(ctx, rollDir)
	s.w.waitFor(60*time.Second, "the client's first confirmed write", func() bool { return wr.confirmed() > 0 })
	var longest time.Duration
	for id := range clusterSize {
		old := s.w.holder(id)
		te, _ := old.tenure()
		pid := s.memberPID(id)
		t0 := time.Now()
		if err := old.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		succ, ste := s.w.takeover(old, id, te.version, 60*time.Second)
		gone := s.memberGone(id, pid, t0, 30*time.Second) // it had to be gone for the release
		s.successor(te, ste, true)
		s.waitHealthy(id, 90*time.Second)
		healthy := time.Since(t0)
		longest = max(longest, healthy)
		t.Logf("%s (v%d) stopped; %s took node %d v%d; healthy after %v", old.name, te.version, succ.name, id, ste.version, healthy.Round(time.Millisecond))
		select {
		case <-old.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s still running 30 s after SIGTERM", old.name)
		}
		s.rows = append(s.rows, row{fmt.Sprintf("3 rolling deploy (SIGTERM) %d/3", id+1), id,
			fmt.Sprintf("v%d->v%d", te.version, ste.version), dataNote(ste), gone, healthy, 0})
		s.w.spare() // the replaced task comes back as the next spare
		time.Sleep(time.Second)
	}
	wr.finish()
	s.rolled = wr.keys
	gap := wr.maxGap()
	t.Logf("client during the deploy: %d writes confirmed, %d failed, longest time without a confirmed write %v (longest handover %v)",
		len(wr.acks), wr.failed, gap.Round(time.Millisecond), longest.Round(time.Millisecond))
	if len(wr.acks) == 0 {
		t.Fatal("no write was confirmed during the rolling deploy")
	}
	// The slack is the client's, not the cluster's: a ZooKeeper client whose
	// server went away waits up to 1 s before it reconnects, and each
	// client writes every 200 ms.
	if gap > longest+2*time.Second {
		t.Errorf("writes stopped for %v, longer than the longest handover (%v) + 2 s", gap, longest)
	}
	s.sameIdentity()
	s.writeAfter(0)
	for id := range clusterSize { // every member was replaced
		s.rows[len(s.rows)-1].keys = s.check(id)
	}
}

func (s *suite) overwrite(t *testing.T) {
	const id = 2
	old := s.w.holder(id)
	te, _ := old.tenure()
	pid := s.memberPID(id)
	pw := s.w.watchMembers()
	t0 := time.Now()
	s.w.overwrite(id, te.version)
	gone := s.memberGone(id, pid, t0, 10*time.Second)
	if gone > renewR+time.Second {
		t.Errorf("member %d killed %v after the overwrite, later than R + 1 s = %v", id, gone, renewR+time.Second)
	}
	succ, ste := s.w.takeover(old, id, te.version, 60*time.Second)
	s.successor(te, ste, false)
	s.waitHealthy(id, 90*time.Second)
	healthy := time.Since(t0)
	t.Logf("lease %d overwritten; %s's member killed after %v; %s took v%d; healthy after %v",
		id, old.name, gone.Round(time.Millisecond), succ.name, ste.version, healthy.Round(time.Millisecond))
	select {
	case <-old.done:
		if old.code != 3 {
			t.Errorf("%s exited with %d after its loss, want 3", old.name, old.code)
		}
	case <-time.After(2*leaseL + 5*time.Second):
		t.Errorf("%s still running after its loss", old.name)
	}
	s.sameIdentity()
	pw.finish(t)
	s.writeAfter(id)
	s.rows = append(s.rows, row{"4 lease overwrite", id, fmt.Sprintf("v%d->v%d", te.version, ste.version), dataNote(ste), gone, healthy, s.check(id)})
	s.w.spare()
}

func (s *suite) blackhole(t *testing.T) {
	const id = 0
	old := s.w.holder(id)
	te, _ := old.tenure()
	pid := s.memberPID(id)
	pw := s.w.watchMembers()
	t0 := time.Now()
	old.proxy.Set(faultproxy.Fault{Blackhole: true})
	gone := s.memberGone(id, pid, t0, 2*leaseL)
	fenced := t0.Add(gone)
	// Its last renewal was sent before t0: it fences at s + L - m < t0 + L,
	// while others may take the ID only L + 1 s after that renewal landed.
	if gone >= leaseL {
		t.Errorf("member %d killed %v after the blackhole, not before L = %v", id, gone, leaseL)
	}
	succ, ste := s.w.takeover(old, id, te.version, 60*time.Second)
	if !fenced.Before(ste.acquired) {
		t.Errorf("member %d seen alive until %s, after %s took the ID at %s", id, fenced.Format("15:04:05.000"), succ.name, ste.acquired.Format("15:04:05.000"))
	}
	s.successor(te, ste, false)
	s.waitHealthy(id, 90*time.Second)
	healthy := time.Since(t0)
	t.Logf("%s blackholed; its member killed after %v; %s took v%d %v after the blackhole; healthy after %v",
		old.name, gone.Round(time.Millisecond), succ.name, ste.version, ste.acquired.Sub(t0).Round(time.Millisecond), healthy.Round(time.Millisecond))
	select {
	case <-old.done:
		if old.code != 3 {
			t.Errorf("%s exited with %d after its loss, want 3", old.name, old.code)
		}
	case <-time.After(2*leaseL + 5*time.Second):
		t.Errorf("%s still running after its loss", old.name)
	}
	s.sameIdentity()
	pw.finish(t)
	s.writeAfter(id)
	s.rows = append(s.rows, row{"5 S3 blackhole", id, fmt.Sprintf("v%d->v%d", te.version, ste.version), dataNote(ste), gone, healthy, s.check(id)})
}

// report logs the recovery table, one line per scenario.
func (s *suite) report() {
	if len(s.rows) == 0 {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-34s %-6s %-8s %-36s %-10s %-10s %s\n", "scenario", "member", "version", "data directory", "gone", "healthy", "keys checked")
	for _, r := range s.rows {
		m, gone := "all", "-"
		if r.member >= 0 {
			m, gone = fmt.Sprint(r.member), fmt.Sprintf("%.2fs", r.gone.Seconds())
		}
		keys := "-"
		if r.keys > 0 {
			keys = fmt.Sprint(r.keys)
		}
		fmt.Fprintf(&b, "%-34s %-6s %-8s %-36s %-10s %-10s %s\n", r.scenario, m, r.versions, r.data, gone, fmt.Sprintf("%.2fs", r.healthy.Seconds()), keys)
	}
	s.top.Logf("recovery (gone: fault to the old member's process gone; healthy: fault to the member serving again):\n%s", b.String())
}
