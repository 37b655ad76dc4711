package main_test

// From an adversarial review of issue 13's stable default lease file
// ($TMPDIR/nodeid-<uid>/lease.json), the `waiting` state and `health`'s
// lookup of that file. Each test is a break of "health never lies" or of
// invariant 4, shown with real nodeid-init processes against VersityGW.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeid/nodeid/clock"
	"github.com/nodeid/nodeid/internal/faultproxy"
	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/leasefile"
	"github.com/nodeid/nodeid/nodeid"
)

// Schedule: cluster of 1. "holder" holds node 0. "spare" (its own TMPDIR, as
// in its own container, or a VM with systemd) waits and writes `waiting` to
// $TMPDIR/nodeid-<uid>/lease.json. The spare then stops: SIGTERM while
// waiting (exit 0, "stop requested before the command started"), or it is
// SIGKILLed. Nothing rewrites the stable file, which run keeps on exit, so
// `health` keeps answering exit 0 "task spare is waiting for a node ID (hot
// spare)" for a task that no longer exists, for ever. The same for `acquire
// --lease-file` interrupted while it waits (docs/cli.md: "no files written").
func TestRevsHealthOfAStoppedSpareStillSaysWaiting(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 1)
	holder := c.runTask("holder", "TMPDIR="+t.TempDir())
	holder.identity(t, 20*time.Second)

	health := func(tmp string, args ...string) (int, string) {
		code, stdout, stderr := c.runCmd(t, []string{"TMPDIR=" + tmp, "NODEID_LEASE_FILE="}, append([]string{"health"}, args...)...)
		return code, stdout + stderr
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		tmp := t.TempDir()
		name := "spare-" + strings.ToLower(sig.String()[:4])
		spare := c.runTask(name, "TMPDIR="+tmp)
		waitFor(t, 10*time.Second, "the spare's waiting state", func() bool {
			code, out := health(tmp)
			return code == 0 && strings.Contains(out, "waiting for a node ID")
		})
		if err := spare.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		code := spare.wait(t, 10*time.Second)
		time.Sleep(500 * time.Millisecond)
		hc, out := health(tmp)
		t.Logf("%s: spare exited %d; then health: exit %d: %s", sig, code, hc, strings.TrimSpace(out))
		if hc == 0 {
			t.Errorf("after the spare was stopped by %v (exit %d), health still passes: %s", sig, code, strings.TrimSpace(out))
		}
	}

	// acquire --lease-file, interrupted while it waits.
	lf := filepath.Join(t.TempDir(), "lease.json")
	acq := c.start("acquirer", nil, "acquire", "--env-file", filepath.Join(t.TempDir(), "env"), "--lease-file", lf)
	waitFor(t, 10*time.Second, "acquire's waiting state", func() bool {
		l, err := leasefile.Read(lf)
		return err == nil && l.State == leasefile.StateWaiting
	})
	if err := acq.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := acq.wait(t, 10*time.Second)
	hc, stdout, stderr := c.runCmd(t, nil, "health", "--lease-file", lf)
	t.Logf("acquire exited %d; health --lease-file: exit %d: %s", code, hc, strings.TrimSpace(stdout+stderr))
	if hc == 0 {
		t.Errorf("after acquire was stopped while waiting (exit %d), health of its lease file still passes: %s", code, strings.TrimSpace(stdout+stderr))
	}
}

// Schedule: on a shared host, another user (uid 65534 here) creates
// /tmp/nodeid-<our uid>/ before our first run and puts a lease.json in it
// saying `held`, node 0 v99, deadline an hour ahead on CLOCK_BOOTTIME (or
// `waiting`). `run` correctly refuses that directory and uses a private one;
// but `health` (the README's health check, no NODEID_LEASE_FILE) reads the
// default path without any of run's checks, and reports the planted lease:
// exit 0, even with --held, while our task waits for a node ID (or while it
// is not running at all). The same with a world-writable directory of ours
// and with a symlink planted at the directory's path.
func TestRevsHealthTrustsAPlantedDefaultLeaseFile(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to create a directory owned by another uid")
	}
	c := newCluster(t, s3test.StartVersity(t), 1)
	holder := c.runTask("holder", "TMPDIR="+t.TempDir())
	holder.identity(t, 20*time.Second)

	planted := leasefile.Lease{State: leasefile.StateHeld, NodeID: 0, Version: 99, TaskID: "attacker",
		ValidUntilBoottimeNs: int64(clock.SystemBoottime() + time.Hour)}
	plant := func(dir string) {
		t.Helper()
		if err := leasefile.Write(filepath.Join(dir, "lease.json"), planted); err != nil {
			t.Fatal(err)
		}
	}
	setups := map[string]func(tmp string){
		"directory of another uid": func(tmp string) {
			dir := filepath.Join(tmp, "nodeid-"+uid())
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			plant(dir)
			for _, p := range []string{dir, filepath.Join(dir, "lease.json")} {
				if err := os.Chown(p, 65534, 65534); err != nil {
					t.Fatal(err)
				}
			}
		},
		"world-writable directory": func(tmp string) {
			dir := filepath.Join(tmp, "nodeid-"+uid())
			if err := os.Mkdir(dir, 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
			plant(dir)
		},
		"symlinked directory": func(tmp string) {
			other := t.TempDir()
			if err := os.Chown(other, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			plant(other)
			if err := os.Symlink(other, filepath.Join(tmp, "nodeid-"+uid())); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, setup := range setups {
		t.Run(name, func(t *testing.T) {
			tmp := t.TempDir()
			if err := os.Chmod(tmp, 0o1777); err != nil { // a shared /tmp
				t.Fatal(err)
			}
			setup(tmp)
			spare := c.runTask("spare", "TMPDIR="+tmp)
			waitFor(t, 10*time.Second, "run to refuse the default directory", func() bool {
				return strings.Contains(spare.out.String(), "using a private one")
			})
			time.Sleep(300 * time.Millisecond)
			if !spare.running() {
				t.Fatalf("spare exited:\n%s", spare.out.String())
			}
			code, stdout, stderr := c.runCmd(t, []string{"TMPDIR=" + tmp, "NODEID_LEASE_FILE="}, "health", "--held")
			t.Logf("run (waiting for a node ID, private lease file) refused the default directory; health --held: exit %d: %s", code, strings.TrimSpace(stdout+stderr))
			if code == 0 {
				t.Errorf("health --held passes on a lease file planted in a directory run refused, while the task holds nothing: %s", strings.TrimSpace(stdout))
			}
			_ = spare.cmd.Process.Kill()
			<-spare.done
		})
	}
}

// Schedule: run A holds node 0 v1 with the default lease file. Its broker
// left a helper outside its process group (setsid). A is SIGKILLed (OOM
// killer): Pdeathsig kills the leader only; the helper survives, as cli.md
// and run's "not PID 1" warning say, and relies on the lease file to fence
// itself: it checks the file as a Go broker is told to (leasefile.Check /
// `health --held`: held and deadline ahead) before each write. A's deadline
// passes and the helper stops writing: correct. Then run A' (systemd
// restart, same user, same $TMPDIR) claims the same stable default file
// (the lock died with A) and writes its own `held` lease (node 0 v2) into
// it. The helper of v1 reads `held` with a deadline ahead and writes again
// to node-0/v1 while v2 is valid. With the per-process default file of
// before, A's file stayed `held v1` with a passed deadline for ever.
// (A broker that also compares nodeId/version with its own, step 3 of the
// lease-file section, is not fooled; leasefile.Check does not compare.)
func TestRevsOrphanOfAKilledRunSeesItsSuccessorsLeaseAsValid(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 1)
	tmp := t.TempDir()
	dir := t.TempDir()
	writes := filepath.Join(dir, "orphan.writes")
	pidFile := filepath.Join(dir, "orphan.pid")
	orphan := `setsid sh -c 'echo $$ > "$ORPHAN_PID"; while :; do if "$NODEID_BIN" health --held --lease-file "$NODE_LEASE_FILE" >/dev/null 2>&1; then echo "v$NODE_VERSION $NODE_LEASE_FILE" >> "$ORPHAN_WRITES"; echo x >> "$NODE_DATA_DIR/orphan.log"; fi; sleep 0.1; done' </dev/null >/dev/null 2>&1 &
` + childScript
	env := []string{"TMPDIR=" + tmp, "NODEID_BIN=" + binary, "ORPHAN_WRITES=" + writes, "ORPHAN_PID=" + pidFile}
	a := c.start("run-a", env, "run", "--", "sh", "-c", orphan)
	if id, v, _ := a.identity(t, 20*time.Second); id != 0 || v != 1 {
		t.Fatalf("A holds node %d v%d", id, v)
	}
	waitFor(t, 5*time.Second, "the orphan helper", func() bool { _, err := os.Stat(pidFile); return err == nil })
	b, _ := os.ReadFile(pidFile)
	opid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	t.Cleanup(func() { _ = syscall.Kill(opid, syscall.SIGKILL) })
	waitFor(t, 5*time.Second, "the orphan's first write", func() bool { _, err := os.Stat(writes); return err == nil })

	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	a.wait(t, 5*time.Second)
	time.Sleep(3 * time.Second) // past A's deadline (L = 2s): the orphan stops
	if !processAlive(opid) {
		t.Fatal("the orphan did not survive (this host kills it: the scenario does not apply)")
	}
	count := func() int { b, _ := os.ReadFile(writes); return strings.Count(string(b), "\n") }
	before := count()
	time.Sleep(500 * time.Millisecond)
	if n := count(); n != before {
		t.Fatalf("the orphan still writes after A's deadline (%d -> %d): the file fence itself failed", before, n)
	}

	a2 := c.start("run-a2", []string{"TMPDIR=" + tmp}, "run", "--", "sh", "-c", childScript)
	id, v, _ := a2.identity(t, 20*time.Second)
	time.Sleep(time.Second)
	after := count()
	l, err := leasefile.Check(filepath.Join(tmp, "nodeid-"+uid(), "lease.json"))
	t.Logf("A' holds node %d v%d; stable file %+v (Check err %v); orphan of v1: %d writes before A', %d after", id, v, l, err, before, after)
	if after > before {
		log, _ := os.ReadFile(filepath.Join(c.root, "node-0", "v1", "orphan.log"))
		t.Errorf("the v1 orphan fenced by the lease file wrote %d more times to node-0/v1 while A' holds node %d v%d (it reads A's successor's lease in the shared stable file as its own); node-0/v1/orphan.log has %d lines",
			after-before, id, v, strings.Count(string(log), "\n"))
	}
}

var _ = exec.Command

// Schedule: node 0's holder crashed (SIGKILL) and its lease expired. The
// operator runs `release --node 0 --force` (no --yes: the guard is to
// refuse if the holder looks alive). Its first two GETs are slow (4 s each:
// a congested link). 1. the guard's GET sees v1 held by the dead task,
// renewed more than a lease duration ago: not live, go ahead. 2. a hot
// spare takes node 0 (v2) and renews. 3. ForceRelease GETs again, sees
// v2 held by the spare that acquired a moment ago (L = 2 s, R = 0.8 s; its
// LIST, survey and PUT are fast and land before the next renewal), and
// overwrites it with a
// forced release (If-Match on its own fresh ETag): the spare, renewed
// within its lease duration, is fenced without --yes, and node 0 is
// acquirable at once while the spare's self-fence deadline is still ahead.
// The guard's decision is not tied to the object ForceRelease writes over
// (no ETag passed through).
func TestRevsReleaseGuardIsBypassedByATakeoverInBetween(t *testing.T) {
	srv := s3test.StartVersity(t)
	c := newCluster(t, srv, 1)
	dead := c.runTask("dead", "TMPDIR="+t.TempDir())
	dead.identity(t, 20*time.Second)
	_ = dead.cmd.Process.Signal(syscall.SIGKILL)
	dead.wait(t, 5*time.Second)
	time.Sleep(4 * time.Second) // L = 2s: expired

	proxy, err := faultproxy.Start(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	proxy.Set(faultproxy.Fault{Methods: []string{"GET"}, Latency: 4 * time.Second})
	rel := c.start("operator", []string{"AWS_ENDPOINT_URL_S3=" + proxy.URL, "TMPDIR=" + t.TempDir()}, "release", "--node", "0", "--force")
	waitFor(t, 15*time.Second, "the guard's GET answered and the next GET on its way", func() bool { return proxy.Stats().ByMethod["GET"] >= 2 })
	proxy.Set(faultproxy.Fault{}) // the rest of release's requests are fast

	p, err := nodeid.NewProvider(c.repo(), nodeid.Config{TaskID: "spare", ClusterSize: 1, LeaseDuration: 2 * time.Second,
		RenewInterval: 800 * time.Millisecond, PollInterval: 200 * time.Millisecond,
		OnLost: func(error) {}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	inst, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	t.Logf("spare holds node %d v%d while release waits for its second GET", inst.ID, inst.Version)
	// A second spare waits for node 0.
	p3, err := nodeid.NewProvider(c.repo(), nodeid.Config{TaskID: "spare-2", ClusterSize: 1, LeaseDuration: 2 * time.Second,
		RenewInterval: 800 * time.Millisecond, PollInterval: 100 * time.Millisecond, OnLost: func(error) {}})
	if err != nil {
		t.Fatal(err)
	}
	type took struct {
		inst       nodeid.NodeInstance
		firstValid bool // the first spare still believed its lease valid then
		err        error
	}
	tookCh := make(chan took, 1)
	go func() {
		i, err := p3.Acquire(ctx)
		tookCh <- took{i, p.Valid(), err}
	}()
	t.Cleanup(func() { _ = p3.Close(context.Background()) })
	code := rel.wait(t, 30*time.Second)
	out := strings.TrimSpace(rel.out.String())
	select {
	case <-p.Done():
	case <-time.After(3 * time.Second):
	}
	t.Logf("release --force (no --yes): exit %d: %s; spare's provider: %v", code, out, p.Err())
	select {
	case tk := <-tookCh:
		t.Logf("second spare: %+v, err %v; first spare still valid at that moment: %v", tk.inst, tk.err, tk.firstValid)
		if tk.err == nil && tk.firstValid {
			t.Errorf("two valid holders of node 0: spare v%d (not yet aware of the forced release) and spare-2 v%d", inst.Version, tk.inst.Version)
		}
	case <-time.After(5 * time.Second):
		t.Logf("second spare took nothing")
	}
	if code == 0 {
		t.Errorf("release --force without --yes fenced a holder (v%d) that had just acquired and renewed: %s (spare: %v)", inst.Version, out, p.Err())
	}
}
