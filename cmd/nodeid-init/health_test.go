package main_test

// From an adversarial review of issue 13's stable default lease file
// ($TMPDIR/nodeid-<uid>/lease.json), the `waiting` state and `health`'s
// lookup of that file. Each test is a break of "health never lies" or of
// invariant 4, shown with real nodeid-init processes against VersityGW.

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeid/nodeid/clock"
	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/leasefile"
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

// Issue 26.8: the two health checks disagreed for a hot spare:
// `nodeid-init health` passed (exit 0), /healthz answered 503, so an HTTP
// health check would have had ECS replace every spare. Both must pass for
// a spare and for a holder; /readyz stays 503 for a spare (it serves
// nothing), and once the spare takes the ID both pass on its lease.
func TestHealthChecksAgreeOnAHotSpare(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 1)
	check := func(who, tmp, addr, wantOut string) {
		t.Helper()
		code, stdout, stderr := c.runCmd(t, []string{"TMPDIR=" + tmp}, "health")
		if code != 0 || !strings.Contains(stdout, wantOut) {
			t.Errorf("%s: nodeid-init health: exit %d, want 0 and %q:\n%s%s", who, code, wantOut, stdout, stderr)
		}
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: /healthz answered %d while nodeid-init health passes, want 200", who, resp.StatusCode)
		}
	}
	holderTmp, holderAddr := t.TempDir(), freeAddr(t)
	holder := c.runTask("holder", "TMPDIR="+holderTmp, "NODEID_METRICS_ADDR="+holderAddr)
	holder.identity(t, 20*time.Second)
	check("holder", holderTmp, holderAddr, "node 0 v1 held by holder")

	spareTmp, spareAddr := t.TempDir(), freeAddr(t)
	spare := c.runTask("spare", "TMPDIR="+spareTmp, "NODEID_METRICS_ADDR="+spareAddr)
	waitFor(t, 10*time.Second, "the spare's waiting state", func() bool {
		code, stdout, _ := c.runCmd(t, []string{"TMPDIR=" + spareTmp}, "health")
		return code == 0 && strings.Contains(stdout, "waiting for a node ID")
	})
	check("hot spare", spareTmp, spareAddr, "task spare is waiting for a node ID (hot spare)")
	if resp, err := http.Get("http://" + spareAddr + "/readyz"); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("hot spare: /readyz answered %d, want 503 (it serves nothing)", resp.StatusCode)
	}

	if err := holder.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	spare.identity(t, 20*time.Second)
	check("the spare after the takeover", spareTmp, spareAddr, "node 0 v2 held by spare")
}
