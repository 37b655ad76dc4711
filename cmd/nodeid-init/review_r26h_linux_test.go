package main_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// chainC is a daemon the command leaves behind: it forks, leaves CMD's
// process group and session (setsid), then runs as a chain of processes,
// each of which forks its successor and exits, so that at any moment one
// process of it is alive, under a pid that /proc did not list a moment
// before. Between from and until seconds after its start each generation
// (or while the file argv[5] exists) forks at once (the window in which the supervisor stops the command);
// outside it, every 20 ms (so it does not burn pids), appending to its log
// each time. argv[6] chains run side by side (1 here: on 2 cores more
// chains leave each generation waiting for a CPU, where a scan finds it).
// It writes its process group (= its session) to pgidfile so the
// test can end it with one kill(-pgid), which fork cannot race.
const chainC = `#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <time.h>
#include <fcntl.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
int main(int argc,char**argv){
  /* argv: log pgidfile fast_from fast_until [fast_while_this_file_exists chains] */
  double t0=now(), from=atof(argv[3]), until=atof(argv[4]);
  if(fork()) _exit(0);
  setsid();
  FILE*p=fopen(argv[2],"w"); fprintf(p,"%d\n",getpgrp()); fclose(p);
  for(int i=1;i<atoi(argv[6]);i++) if(fork()==0) break;
  long n=0;
  for(;;){
    double t=now()-t0;
    int fast = argc>5 ? access(argv[5],F_OK)==0 : (t>=from && t<=until);
    if(!fast) usleep(20000);
    pid_t c=fork();
    if(c>0) _exit(0);
    if(c<0) { usleep(1000); continue; }
    n++;
    if(!fast||n%200==0){int fd=open(argv[1],O_WRONLY|O_APPEND|O_CREAT,0644); if(fd>=0){dprintf(fd,"gen %ld t=%.3f\n",n,t); close(fd);}}
  }
}
`

// buildChain compiles chainC.
func buildChain(t *testing.T) string { return buildC(t, chainC) }

// buildC compiles a C test program (gcc is a test tool, make test-tools).
func buildC(t *testing.T, code string) string {
	t.Helper()
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "chain.c"), filepath.Join(dir, "chain")
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O2", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return bin
}

func killChain(t *testing.T, file string) {
	b, err := os.ReadFile(file)
	if err != nil {
		return
	}
	pg, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pg <= 1 {
		return
	}
	for i := 0; i < 20; i++ {
		_ = syscall.Kill(-pg, syscall.SIGKILL)
		time.Sleep(10 * time.Millisecond)
	}
}

// Review r26h (invariants 1, 3 and 4; "a child that forks and changes its
// process group or session"): the supervisor finds the command's processes
// by scanning /proc (leftovers: its process group, and descendants of
// nodeid-init, a subreaper). A process that left the group is killed only if
// a scan lists it alive and the SIGKILL by pid reaches it before it forked
// again. A daemon that runs as a fork-and-exit chain (each generation forks
// and exits at once) is, at each scan, a pid that is gone or a zombie (dead()
// skips it) by the time its stat is read, its live successor not yet listed.
// killLeftovers' two empty looks then report "processes of the command
// gone", syncfs runs and the lease is released while the chain still
// appends to node-0/v1; the successor hard-links v1 into v2 and the stale
// writes land in its files.
//
// Schedule (L = 2 s, R = 500 ms): holder = run -- sh: reports, starts the
// chain (setsid, slow), sleeps 1 s, turns the chain fast, exits 0; stopRest →
// killLeftovers finds nothing
// (twice) → "lease released", exit 0; the chain still appends to
// node-0/v1/chain.log; a successor takes node 0 at v2 (previous_graceful)
// and its v2/chain.log (same inode) still grows.
// Expected: no release while a process the command started is alive (kill
// it, or leave the lease to expire and say so).
func TestReviewR26hForkChainDaemonSurvivesTheStopAndTheLeaseIsReleased(t *testing.T) {
	// Whether a scan catches the chain depends on the load: on 2 cores
	// shared by other test runs (load 5-6) the first round failed in 5 runs
	// of 6; on a quieter machine about 1 round in 20 did. Up to 12 rounds,
	// each a fresh cluster; one evasion is the break.
	chain := buildChain(t)
	for round := 1; round <= 12; round++ {
		if forkChainRound(t, chain, round) {
			return
		}
	}
}

// forkChainRound runs one holder with the chain and reports whether it
// found the break (then t has failed).
func forkChainRound(t *testing.T, chain string, round int) bool {
	c := newCluster(t, s3test.NewFake(t), 1)
	pgFile, fast := filepath.Join(c.dir, "chain.pgid"), filepath.Join(c.dir, "fast")
	defer killChain(t, pgFile)
	defer os.Remove(fast)
	// CMD turns the chain fast just before it exits; the test turns it
	// slow again once nodeid-init has exited.
	script := `echo "$NODE_ID $NODE_VERSION $NODE_PREVIOUS_GRACEFUL" > "$REPORT"
"$CHAIN" "$NODE_DATA_DIR/chain.log" "$CHAIN_PGID" 0 0 "$FAST" 1 </dev/null >/dev/null 2>&1
sleep 1
: > "$FAST"
sleep 0.1
exit 0`
	holder := c.start("holder", []string{"CHAIN_PGID=" + pgFile, "CHAIN=" + chain, "FAST=" + fast}, "run", "--", "sh", "-c", script)
	if _, v, _ := holder.identity(t, 20*time.Second); v != 1 {
		t.Fatalf("holder got v%d, want v1", v)
	}
	v1log := filepath.Join(c.root, "node-0", "v1", "chain.log")
	waitFor(t, 5*time.Second, "the chain to write "+v1log, func() bool { return grows(v1log, 200*time.Millisecond) })
	code := holder.wait(t, 20*time.Second)
	_ = os.Remove(fast)
	out := holder.out.String()
	t.Logf("round %d: holder exited %d; %s", round, code, lineWith(out, "processes of the command"))
	alive := grows(v1log, 300*time.Millisecond)
	if !alive {
		return false // caught by the scan: the release was safe
	}
	if !strings.Contains(out, "lease released") {
		t.Errorf("the chain still writes after the holder exited %d (no release):\n%s", code, out)
		return true
	}
	t.Errorf("the lease was released (exit %d) while the command's fork-and-exit daemon still appends to %s", code, v1log)
	succ := c.runTask("succ")
	_, v, graceful := succ.identity(t, 20*time.Second)
	v2log := filepath.Join(c.root, "node-0", "v2", "chain.log")
	if v == 2 && grows(v2log, 300*time.Millisecond) {
		t.Errorf("the successor holds node 0 at v2 (previous_graceful=%v) and its %s still grows: writes of the released v1's command", graceful, v2log)
	}
	return true
}

// lineWith is the first line of out that contains s.
func lineWith(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// Review r26h (invariant 4; outside docs' limits: nodeid-init is not
// SIGKILLed, it runs its whole stop sequence): the same fork-and-exit chain
// evades the fence. On a loss, fence.kill SIGKILLs the group and what one
// /proc scan lists (killTree), and awaitTreeDead / killLeftovers look until
// two scans in a row find nothing alive: each look sees a chain's pid gone
// or a zombie. nodeid-init logs "command killed: lease lost", exits 3, and
// the chain appends to node-0/v1 under the other holder's lease.
//
// Schedule (L = 2 s, R = 500 ms): holder = run -- sh: reports, starts the
// chain (slow, one fork per 20 ms), sleeps; the test makes the chain fast
// (a trigger file), then overwrites node 0's lease object with another
// task's (taskId abc, an hour long); the next renewal gets 412: OnFence,
// stop sequence, exit 3; the chain (slow again) still appends to v1.
// Expected: nothing of the command alive once the loss is handled.
func TestReviewR26hForkChainDaemonSurvivesTheFenceOnALoss(t *testing.T) {
	chain := buildChain(t)
	for round := 1; round <= 12; round++ {
		if forkChainLossRound(t, chain, round) {
			return
		}
	}
}

func forkChainLossRound(t *testing.T, chain string, round int) bool {
	c := newCluster(t, s3test.NewFake(t), 1)
	pgFile, fast := filepath.Join(c.dir, "chain.pgid"), filepath.Join(c.dir, "fast")
	defer killChain(t, pgFile)
	defer os.Remove(fast)
	script := `echo "$NODE_ID $NODE_VERSION $NODE_PREVIOUS_GRACEFUL" > "$REPORT"
"$CHAIN" "$NODE_DATA_DIR/chain.log" "$CHAIN_PGID" 0 0 "$FAST" 1 </dev/null >/dev/null 2>&1
exec sleep 300`
	holder := c.start("holder", []string{"CHAIN_PGID=" + pgFile, "CHAIN=" + chain, "FAST=" + fast}, "run", "--", "sh", "-c", script)
	id, v, _ := holder.identity(t, 20*time.Second)
	v1log := filepath.Join(c.root, "node-0", "v1", "chain.log")
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
	t.Logf("round %d: holder exited %d; %s", round, code, lineWith(out, "processes of the command"))
	if !grows(v1log, 300*time.Millisecond) {
		return false // the fence caught every chain
	}
	t.Errorf("node 0 is another task's (taskId abc) and nodeid-init exited %d (%q), yet the command's fork-and-exit daemon still appends to %s",
		code, lineWith(out, "command killed"), v1log)
	return true
}
