package main_test

// Issue 19: the supervisor's own resources (file descriptors, the lease
// file) and its duties as PID 1 (reaping).

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/leasefile"
)

// Idle connections to the metrics server under a 64-fd limit: the old
// server accepted them all, the lease-file write then failed with "too many
// open files" (only logged), the broker's deadline passed while the lease
// stayed held. Now extra connections are closed at once and the lease file
// stays current.
func TestIdleMetricsConnectionsDoNotStarveTheLeaseFile(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("no prlimit")
	}
	c := newCluster(t, s3test.StartVersity(t), 1)
	addr := freeAddr(t)
	leaseFile := filepath.Join(t.TempDir(), "lease.json")
	tk := c.startProgram("holder", []string{"NODEID_METRICS_ADDR=" + addr, "NODEID_LEASE_FILE=" + leaseFile},
		"prlimit", "--nofile=64", binary, "run", "--", "sh", "-c", childScript)
	tk.identity(t, 20*time.Second)

	var conns []net.Conn
	defer func() {
		for _, cn := range conns {
			cn.Close()
		}
	}()
	for range 200 {
		cn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, cn)
	}
	// The last one is beyond the limit: closed by the server at once.
	last := conns[len(conns)-1]
	last.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := last.Read(make([]byte, 1)); err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("connection beyond the limit: read = %v, want EOF (closed by the server)", err)
	}
	// Longer than the lease (2 s): only renewals keep the file valid.
	time.Sleep(3 * time.Second)
	if !tk.running() {
		t.Fatalf("nodeid-init exited %d:\n%s", tk.code, tk.out.String())
	}
	if _, err := leasefile.Check(leaseFile); err != nil {
		t.Fatalf("lease file not kept current while the metrics server was flooded: %v\n%s", err, tk.out.String())
	}
	if strings.Contains(tk.out.String(), "cannot update the lease file") {
		t.Fatalf("a lease-file write failed:\n%s", tk.out.String())
	}
}

// A lease file that cannot be written any more (its directory removed):
// /healthz fails at once, and the second failed write in a row ends the
// tenure like a loss: the command is killed, exit 3, no release.
func TestUnwritableLeaseFileFailsHealthzAndEndsTheTenure(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 1)
	addr := freeAddr(t)
	dir := t.TempDir()
	leaseFile := filepath.Join(dir, "lease.json")
	tk := c.start("holder", []string{"NODEID_METRICS_ADDR=" + addr, "NODEID_LEASE_FILE=" + leaseFile},
		"run", "--", "sh", "-c", childScript)
	tk.identity(t, 20*time.Second)
	child := childPID(t, tk)
	if code := healthz(addr); code != 200 {
		t.Fatalf("/healthz = %d before the fault", code)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	saw503 := false
	deadline := time.Now().Add(10 * time.Second)
	for tk.running() && time.Now().Before(deadline) {
		if healthz(addr) == 503 {
			saw503 = true
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code := tk.wait(t, 10*time.Second); code != 3 {
		t.Fatalf("exit code %d, want 3:\n%s", code, tk.out.String())
	}
	if !saw503 {
		t.Errorf("/healthz never failed between the failed write and the exit:\n%s", tk.out.String())
	}
	if processAlive(child) {
		t.Errorf("command (pid %d) still alive", child)
	}
	out := tk.out.String()
	if !strings.Contains(out, "cannot update the lease file") || !strings.Contains(out, "command killed") || strings.Contains(out, "lease released") {
		t.Fatalf("want a failed write, the command killed, no release:\n%s", out)
	}
}

// The first lease-file write fails: the command is never started and the
// lease is released (nothing ran), so a successor takes it over at once.
func TestFirstLeaseFileWriteFailingNeverStartsTheCommand(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 1)
	tk := c.start("first", []string{"NODEID_TEST_LEASE_FILE_FAIL=1"}, "run", "--", "sh", "-c", childScript)
	if code := tk.wait(t, 20*time.Second); code != 1 {
		t.Fatalf("exit code %d, want 1:\n%s", code, tk.out.String())
	}
	if _, err := os.Stat(tk.report); err == nil {
		t.Fatalf("the command ran:\n%s", tk.out.String())
	}
	if !strings.Contains(tk.out.String(), "the command was not started: cannot write the lease file") {
		t.Fatalf("no clear error:\n%s", tk.out.String())
	}
	_, _, graceful := c.runTask("second").identity(t, 20*time.Second)
	if !graceful {
		t.Fatalf("the lease was not released (successor sees previous_graceful=false):\n%s", tk.out.String())
	}
}

func healthz(addr string) int {
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get("http://" + addr + "/healthz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// orphanScript double-forks orphans that exit at once (each becomes a child
// of nodeid-init, the subreaper or PID 1), reports, keeps running for a
// while, then exits 7.
const orphanScript = `for i in 1 2 3 4 5 6 7 8; do (sh -c 'exit 0' &); done
echo "$NODE_ID $NODE_VERSION $NODE_PREVIOUS_GRACEFUL" > "$REPORT"
for i in 1 2 3 4 5 6 7 8; do (sh -c 'exit 0' &); done
sleep 3; exit 7`

// Orphans of the command that exit must not stay zombies under nodeid-init
// while the command runs, also when it is PID 1 of a PID namespace whose
// /proc is the host's (`unshare --pid --fork`, the old /proc-based reaper
// never matched there); the command's exit code still comes through.
func TestOrphansOfTheCommandAreReaped(t *testing.T) {
	for _, pidns := range []bool{false, true} {
		t.Run(fmt.Sprintf("pid_namespace=%v", pidns), func(t *testing.T) {
			prog, args := binary, []string{"run", "--", "sh", "-c", orphanScript}
			if pidns {
				if _, err := exec.LookPath("unshare"); err != nil || os.Getuid() != 0 {
					t.Skip("needs unshare and root")
				}
				prog, args = "unshare", append([]string{"--pid", "--fork", binary}, args...)
			}
			c := newCluster(t, s3test.StartVersity(t), 1)
			tk := c.startProgram("holder", nil, prog, args...)
			tk.identity(t, 20*time.Second)
			initPid := tk.cmd.Process.Pid
			if pidns {
				initPid = onlyChild(t, initPid)
			}
			time.Sleep(time.Second) // the orphans have long exited
			var zombies []int
			for _, p := range procsOf(t, initPid) {
				if p.state == "Z" {
					zombies = append(zombies, p.pid)
				}
			}
			if len(zombies) > 0 {
				t.Errorf("zombie children of nodeid-init (pid %d) while the command runs: %v", initPid, zombies)
			}
			if code := tk.wait(t, 20*time.Second); code != 7 {
				t.Fatalf("exit code %d, want the command's 7:\n%s", code, tk.out.String())
			}
			// With the host's /proc, what the command left cannot be
			// found: the lease is left to expire, nothing killed by pids
			// of another namespace.
			out := tk.out.String()
			if released := strings.Contains(out, "lease released"); released == pidns || pidns != strings.Contains(out, "/proc is not this PID namespace's") {
				t.Fatalf("released=%v, want %v, with a warning iff in a PID namespace:\n%s", released, !pidns, out)
			}
		})
	}
}

type childProc struct {
	pid   int
	state string
}

// procsOf lists the children of ppid with their state, from the test's /proc.
func procsOf(t *testing.T, ppid int) []childProc {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []childProc
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		var pid, pp int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil || len(f) < 2 {
			continue
		}
		fmt.Sscan(f[1], &pp)
		if pp == ppid {
			out = append(out, childProc{pid, f[0]})
		}
	}
	return out
}

func onlyChild(t *testing.T, ppid int) int {
	t.Helper()
	var kids []childProc
	waitFor(t, 5*time.Second, "the child of unshare", func() bool {
		kids = procsOf(t, ppid)
		return len(kids) == 1
	})
	return kids[0].pid
}

// From an adversarial review of issue 13's stable default lease file
// ($TMPDIR/nodeid-<uid>/lease.json): a break of invariant 4.
//
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
