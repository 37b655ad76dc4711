package main_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// ownGroupChainC is review r26h's fork-and-exit chain daemon, but instead
// of a new session (setsid, whose group the r26h fix kills by a zombie's
// pgid) it joins the supervisor's own process group: setpgid(0, G), G =
// nodeid-init's pgid (argv[3]). That is allowed (same session), and it is
// the one group descendantGroups leaves out (c.pgid != own), so neither
// kill(-CMD's group) nor kill(-descendant group) reaches it; it is caught
// only if a /proc scan lists one of its generations alive and the kill by
// pid lands before it forked again. It forks fast while argv[4] exists,
// every 20 ms otherwise, and exits once argv[5] exists (the test's
// cleanup: kill(-G) would hit the test binary's own group).
const ownGroupChainC = `#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <time.h>
#include <fcntl.h>
int main(int argc,char**argv){
  /* argv: log pgidfile supervisor_pgid fast_file quit_file */
  if(fork()) _exit(0);
  if(setpgid(0, atoi(argv[3]))!=0){ perror("setpgid"); _exit(1); }
  FILE*p=fopen(argv[2],"w"); fprintf(p,"%d\n",getpgrp()); fclose(p);
  long n=0;
  for(;;){
    if(access(argv[5],F_OK)==0) _exit(0);
    int fast = access(argv[4],F_OK)==0;
    if(!fast) usleep(20000);
    pid_t c=fork();
    if(c>0) _exit(0);
    if(c<0) { usleep(1000); continue; }
    n++;
    if(!fast||n%200==0){int fd=open(argv[1],O_WRONLY|O_APPEND|O_CREAT,0644); if(fd>=0){dprintf(fd,"gen %ld pgid %d\n",n,getpgrp()); close(fd);}}
  }
}
`

func buildOwnGroupChain(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "chain.c"), filepath.Join(dir, "chain")
	if err := os.WriteFile(src, []byte(ownGroupChainC), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O2", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return bin
}

// quitChain makes the chain exit by itself (it checks the file at every
// generation) and waits until its log stops growing.
func quitChain(t *testing.T, quit, log string) {
	_ = os.WriteFile(quit, nil, 0o644)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && grows(log, 100*time.Millisecond) {
	}
}

// The command's sh reads nodeid-init's pgid (field 5 of /proc/$PPID/stat:
// its comm has no space) and hands it to the chain.
const ownGroupScriptHead = `echo "$NODE_ID $NODE_VERSION $NODE_PREVIOUS_GRACEFUL" > "$REPORT"
G=$(cut -d' ' -f5 /proc/$PPID/stat)
"$CHAIN" "$NODE_DATA_DIR/chain.log" "$CHAIN_PGID" "$G" "$FAST" "$QUIT" </dev/null >/dev/null 2>&1
`

// Review r26i (invariant 4; "a child that forks and changes its process
// group"): the r26h fix kills the process group of every descendant, zombies
// included, but never nodeid-init's own group (descendantGroups: c.pgid !=
// own). A daemon that joins that group with one setpgid (not a new session
// at each generation, the limit docs/cli.md states) and runs as a
// fork-and-exit chain is as invisible to the scans as r26h's chain was
// before the fix.
//
// Schedule (L = 2 s, R = 500 ms; nodeid-init not PID 1): holder = run -- sh:
// reports, starts the chain (setpgid into nodeid-init's group, slow),
// sleeps; the test makes the chain fast (a trigger file) and overwrites node
// 0's lease object with another task's (taskId abc, an hour long); the next
// renewal gets 412: OnFence (killTree, awaitTreeDead), stop sequence, exit
// 3; the chain still appends to node-0/v1 under abc's lease.
// Expected: nothing of the command alive once the loss is handled.
func TestReviewR26iOwnGroupForkChainSurvivesTheFenceOnALoss(t *testing.T) {
	chain := buildOwnGroupChain(t)
	for round := 1; round <= 12; round++ {
		if ownGroupLossRound(t, chain, round) {
			return
		}
	}
}

func ownGroupLossRound(t *testing.T, chain string, round int) bool {
	c := newCluster(t, s3test.NewFake(t), 1)
	pgFile, fast, quit := filepath.Join(c.dir, "chain.pgid"), filepath.Join(c.dir, "fast"), filepath.Join(c.dir, "quit")
	v1log := filepath.Join(c.root, "node-0", "v1", "chain.log")
	defer quitChain(t, quit, v1log)
	defer os.Remove(fast)
	script := ownGroupScriptHead + "exec sleep 300"
	holder := c.start("holder", []string{"CHAIN_PGID=" + pgFile, "CHAIN=" + chain, "FAST=" + fast, "QUIT=" + quit}, "run", "--", "sh", "-c", script)
	id, v, _ := holder.identity(t, 20*time.Second)
	waitFor(t, 5*time.Second, "the chain to write "+v1log, func() bool { return grows(v1log, 200*time.Millisecond) })
	if err := os.WriteFile(fast, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	body := fmt.Sprintf(`{"taskId":"abc","timestamp":%d,"nodeInstance":{"id":%d,"version":%d},"knownVersionMappings":{"mappingsByNodeId":{}}}`,
		time.Now().Add(time.Hour).UnixMilli(), id, v)
	putObject(t, c.srv, "e2e/"+nodeid.LeaseKey("", id), body, map[string]string{"taskid": "abc", "version": fmt.Sprint(v), "acquirable": "true"})
	code := holder.wait(t, 15*time.Second)
	_ = os.Remove(fast)
	out := holder.out.String()
	pg, _ := os.ReadFile(pgFile)
	t.Logf("round %d: holder exited %d; chain pgid %s; %s", round, code, strings.TrimSpace(string(pg)), lineWith(out, "processes of the command"))
	if !grows(v1log, 300*time.Millisecond) {
		return false // the fence caught the chain
	}
	t.Errorf("node 0 is another task's (taskId abc) and nodeid-init exited %d (%q), yet the command's fork-and-exit daemon in nodeid-init's own process group still appends to %s",
		code, lineWith(out, "command killed"), v1log)
	return true
}

// Review r26i (invariants 3 and 4): the same chain through the stop
// sequence. CMD exits 0; killLeftovers' two empty looks report "processes
// of the command gone", syncfs runs and the lease is released while the
// chain still appends to node-0/v1; the successor (previous_graceful)
// hard-links v1 into v2 and the stale writes land in its files.
func TestReviewR26iOwnGroupForkChainSurvivesTheStopAndTheLeaseIsReleased(t *testing.T) {
	chain := buildOwnGroupChain(t)
	for round := 1; round <= 12; round++ {
		if ownGroupStopRound(t, chain, round) {
			return
		}
	}
}

func ownGroupStopRound(t *testing.T, chain string, round int) bool {
	c := newCluster(t, s3test.NewFake(t), 1)
	pgFile, fast, quit := filepath.Join(c.dir, "chain.pgid"), filepath.Join(c.dir, "fast"), filepath.Join(c.dir, "quit")
	v1log := filepath.Join(c.root, "node-0", "v1", "chain.log")
	v2log := filepath.Join(c.root, "node-0", "v2", "chain.log")
	defer quitChain(t, quit, v2log)
	defer quitChain(t, quit, v1log)
	defer os.Remove(fast)
	script := ownGroupScriptHead + `sleep 1
: > "$FAST"
sleep 0.1
exit 0`
	holder := c.start("holder", []string{"CHAIN_PGID=" + pgFile, "CHAIN=" + chain, "FAST=" + fast, "QUIT=" + quit}, "run", "--", "sh", "-c", script)
	if _, v, _ := holder.identity(t, 20*time.Second); v != 1 {
		t.Fatalf("holder got v%d, want v1", v)
	}
	waitFor(t, 5*time.Second, "the chain to write "+v1log, func() bool { return grows(v1log, 200*time.Millisecond) })
	code := holder.wait(t, 20*time.Second)
	_ = os.Remove(fast)
	out := holder.out.String()
	t.Logf("round %d: holder exited %d; %s", round, code, lineWith(out, "processes of the command"))
	if !grows(v1log, 300*time.Millisecond) {
		return false // caught by the scan: the release was safe
	}
	if !strings.Contains(out, "lease released") {
		t.Errorf("the chain still writes after the holder exited %d (no release):\n%s", code, out)
		return true
	}
	t.Errorf("the lease was released (exit %d) while the command's fork-and-exit daemon in nodeid-init's own group still appends to %s", code, v1log)
	succ := c.runTask("succ")
	_, v, graceful := succ.identity(t, 20*time.Second)
	if v == 2 && grows(v2log, 300*time.Millisecond) {
		t.Errorf("the successor holds node 0 at v2 (previous_graceful=%v) and its %s still grows: writes of the released v1's command", graceful, v2log)
	}
	return true
}

// Review r26i (invariant 5: "no write outside the data root"; docs/cli.md:
// under the data root "no symlink there is followed"): `acquire` checks its
// --lease-file under the data root (reached without a symlink, no node-N),
// but `renew`, the sidecar that keeps that very file current (docs: "give
// renew the same path"), takes no --data-root (NODEID_DATA_ROOT is not one
// of its settings): it resolves the lease file's directory by its path,
// symlinks followed, as the operator's own, and holds it.
//
// Schedule: acquire --data-root D --lease-file D/leases/lease.json: exit 0,
// D/leases/lease.json written. A tenant of D (another task's broker on the
// shared volume) renames D/leases away and puts a symlink D/leases -> O (any
// directory outside D, or another node's live node-M/vK). renew (same env)
// adopts and writes lease.json and its temporary files in O at every
// renewal. Expected: the symlink under the data root refused (exit 2, as
// acquire and run do), nothing written in O.
func TestReviewR26iRenewFollowsASymlinkPlantedUnderTheDataRootForItsLeaseFile(t *testing.T) {
	c := newCluster(t, s3test.NewFake(t), 1)
	leases := filepath.Join(c.root, "leases")
	if err := os.Mkdir(leases, 0o755); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	env := []string{"NODEID_ENV_FILE=" + filepath.Join(t.TempDir(), "node.env"), "NODEID_LEASE_FILE=" + filepath.Join(leases, "lease.json")}
	if code := c.start("task-a", env, "acquire").wait(t, 20*time.Second); code != 0 {
		t.Fatalf("acquire exited %d", code)
	}
	if _, err := os.Stat(filepath.Join(leases, "lease.json")); err != nil {
		t.Fatalf("acquire wrote no lease file under the data root: %v", err)
	}
	// The tenant's swap, between acquire and renew.
	if err := os.Rename(leases, leases+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, leases); err != nil {
		t.Fatal(err)
	}
	tk := c.start("task-a", env, "renew")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(tk.out.String(), "renewing adopted lease") && tk.running() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(1200 * time.Millisecond) // two renewals
	if b, err := os.ReadFile(filepath.Join(outside, "lease.json")); err == nil {
		t.Errorf("renew wrote its lease file outside the data root %s, through the symlink %s -> %s planted under it (running=%v):\n%s",
			c.root, leases, outside, tk.running(), b)
	} else if tk.running() {
		t.Errorf("renew runs but wrote no lease file in %s (%v):\n%s", outside, err, tk.out.String())
	}
}

// rootHelperC becomes root for good (setuid(0) in a setuid-root binary: real,
// effective and saved uid 0, as su, sudo or a privileged helper leave it),
// writes its pid to argv[2], then appends to argv[1] every 20 ms.
const rootHelperC = `#include <stdio.h>
#include <unistd.h>
#include <fcntl.h>
int main(int argc,char**argv){
  if(setuid(0)!=0){ perror("setuid"); return 1; }
  FILE*p=fopen(argv[2],"w"); fprintf(p,"%d\n",getpid()); fclose(p);
  for(long n=0;;n++){ int fd=open(argv[1],O_WRONLY|O_APPEND|O_CREAT,0644); if(fd>=0){dprintf(fd,"root %ld\n",n); close(fd);} usleep(20000); }
}
`

// Review r26i (invariant 4; docs/design.md: only "a process stuck in the
// kernel on a hung NFS server" survives the kill): nodeid-init running as an
// unprivileged user (USER in the image) cannot SIGKILL a process of the
// command that became another user. kill(-pgid) and kill(pid) get EPERM and
// are ignored; the fence waits its 1 s, the stop sequence its 5 s, logs the
// survivor and exits 3, and the helper keeps writing node-0/v1 under the
// other task's lease. Nothing at start-up refuses or warns about it.
//
// Schedule (L = 2 s, R = 500 ms): setpriv --reuid 65534 nodeid-init run --
// sh: reports, starts the setuid-root helper (it setuid(0)s and appends to
// $NODE_DATA_DIR/root.log), sleeps; the test overwrites node 0's object with
// task abc's; the renewal gets 412: fence, stop sequence, exit 3; root.log
// still grows. Expected: no process of the command alive once the loss is
// handled (or a refusal to run a command nodeid-init cannot stop).
func TestReviewR26iUnprivilegedSupervisorCannotKillASetuidHelperOnALoss(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("needs root to build a setuid-root helper and drop to uid 65534 (CI runs as root)")
	}
	bin := t.TempDir()
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	src, helper := filepath.Join(bin, "h.c"), filepath.Join(bin, "roothelper")
	if err := os.WriteFile(src, []byte(rootHelperC), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O2", "-o", helper, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	if err := os.Chmod(helper, os.ModeSetuid|0o755); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(bin, "nodeid-init")
	if out, err := exec.Command("cp", binary, prog).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	c := newCluster(t, s3test.NewFake(t), 1)
	tmp := t.TempDir()
	for _, d := range []string{c.root, c.dir, tmp} {
		_ = os.Chmod(filepath.Dir(d), 0o755)
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	pidFile := filepath.Join(c.dir, "helper.pid")
	defer func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			var pid int
			if _, err := fmt.Sscan(string(b), &pid); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}()
	script := `echo "$NODE_ID $NODE_VERSION $NODE_PREVIOUS_GRACEFUL" > "$REPORT"
grep -E "NoNewPrivs|Uid" /proc/self/status > "$HELPER_PID.st"; ls -l "$HELPER" >> "$HELPER_PID.st"
"$HELPER" "$NODE_DATA_DIR/root.log" "$HELPER_PID" </dev/null >/dev/null 2>"$HELPER_PID.err" &
exec sleep 300`
	holder := c.startProgram("holder", []string{"HELPER=" + helper, "HELPER_PID=" + pidFile, "TMPDIR=" + tmp, "HOME=" + tmp},
		"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", prog, "run", "--", "sh", "-c", script)
	id, v, _ := holder.identity(t, 20*time.Second)
	v1log := filepath.Join(c.root, "node-0", "v1", "root.log")
	if !waitUntil(5*time.Second, func() bool { return grows(v1log, 200*time.Millisecond) }) {
		errb, _ := os.ReadFile(pidFile + ".err")
		st, _ := os.ReadFile(pidFile + ".st")
		errb = append(errb, st...)
		t.Fatalf("the helper did not write %s: %s", v1log, errb)
	}
	body := fmt.Sprintf(`{"taskId":"abc","timestamp":%d,"nodeInstance":{"id":%d,"version":%d},"knownVersionMappings":{"mappingsByNodeId":{}}}`,
		time.Now().Add(time.Hour).UnixMilli(), id, v)
	putObject(t, c.srv, "e2e/"+nodeid.LeaseKey("", id), body, map[string]string{"taskid": "abc", "version": fmt.Sprint(v), "acquirable": "true"})
	code := holder.wait(t, 20*time.Second)
	out := holder.out.String()
	if grows(v1log, 300*time.Millisecond) {
		t.Errorf("node 0 is another task's (taskId abc) and nodeid-init exited %d (%q; %q), yet the command's helper (now root) still appends to %s",
			code, lineWith(out, "command killed"), lineWith(out, "still alive"), v1log)
	}
}

func waitUntil(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return false
}
