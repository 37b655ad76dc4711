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
// pgid) it tries to join the supervisor's own process group: setpgid(0, G),
// G = nodeid-init's pgid (argv[3]), the one group descendantGroups leaves
// out. It writes the kernel's answer to argv[2] ("setpgid: EPERM", or the
// group it joined) and runs on either way. It forks fast while argv[4]
// exists, every 20 ms otherwise, and exits once argv[5] exists (the test's
// cleanup: kill(-G) would hit the test binary's own group).
const ownGroupChainC = `#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <time.h>
#include <fcntl.h>
#include <errno.h>
#include <string.h>
int main(int argc,char**argv){
  /* argv: log pgidfile supervisor_pgid fast_file quit_file */
  if(fork()) _exit(0);
  int r=setpgid(0, atoi(argv[3]));
  FILE*p=fopen(argv[2],"w");
  if(r!=0) fprintf(p,"setpgid: %s\n", errno==EPERM?"EPERM":strerror(errno)); else fprintf(p,"%d\n",getpgrp());
  fclose(p);
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

func buildOwnGroupChain(t *testing.T) string { return buildC(t, ownGroupChainC) }

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
// own). A fork-and-exit chain that joined that group with one setpgid was
// as invisible to the scans as r26h's chain before its fix. The fix: CMD
// runs in a session of its own, and a group is joined only within a
// session, so the kernel refuses the setpgid.
//
// Schedule (L = 2 s, R = 500 ms; nodeid-init not PID 1): holder = run -- sh:
// reports, starts the chain (tries setpgid into nodeid-init's group, slow),
// sleeps; the test makes the chain fast (a trigger file) and overwrites node
// 0's lease object with another task's (taskId abc, an hour long); the next
// renewal gets 412: fence, stop sequence, exit 3.
// Expected: setpgid refused (EPERM), nothing of the command writes node-0/v1
// once the loss is handled.
func TestReviewR26iOwnGroupForkChainIsRefusedItsGroupAndDiesOnALoss(t *testing.T) {
	chain := buildOwnGroupChain(t)
	for round := 1; round <= 3; round++ {
		ownGroupLossRound(t, chain, round)
	}
}

func ownGroupLossRound(t *testing.T, chain string, round int) {
	c := newCluster(t, s3test.NewFake(t), 1)
	pgFile, fast, quit := filepath.Join(c.dir, "chain.pgid"), filepath.Join(c.dir, "fast"), filepath.Join(c.dir, "quit")
	v1log := filepath.Join(c.root, "node-0", "v1", "chain.log")
	defer quitChain(t, quit, v1log)
	defer os.Remove(fast)
	script := ownGroupScriptHead + "exec sleep 300"
	holder := c.start("holder", []string{"CHAIN_PGID=" + pgFile, "CHAIN=" + chain, "FAST=" + fast, "QUIT=" + quit}, "run", "--", "sh", "-c", script)
	id, v, _ := holder.identity(t, 20*time.Second)
	waitFor(t, 5*time.Second, "the chain to write "+v1log, func() bool { return grows(v1log, 200*time.Millisecond) })
	assertRefused(t, pgFile, "setpgid: EPERM", "the chain's setpgid into nodeid-init's process group")
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
	if code != 3 {
		t.Errorf("round %d: exit code %d after the lease was overwritten, want 3", round, code)
	}
	if grows(v1log, 300*time.Millisecond) {
		t.Errorf("round %d: node 0 is another task's (taskId abc) and nodeid-init exited %d (%q), yet the command's fork-and-exit daemon still appends to %s",
			round, code, lineWith(out, "command killed"), v1log)
	}
}

// Review r26i (invariants 3 and 4): the same chain through the stop
// sequence. Before the fix CMD exited 0, killLeftovers' two empty looks
// reported "processes of the command gone" and the lease was released while
// the chain in nodeid-init's group still appended to node-0/v1. Expected:
// setpgid refused, nothing of the command writes once the lease is released,
// nor in the successor's v2.
func TestReviewR26iOwnGroupForkChainIsRefusedItsGroupAndDiesBeforeTheRelease(t *testing.T) {
	chain := buildOwnGroupChain(t)
	for round := 1; round <= 3; round++ {
		ownGroupStopRound(t, chain, round)
	}
}

func ownGroupStopRound(t *testing.T, chain string, round int) {
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
	assertRefused(t, pgFile, "setpgid: EPERM", "the chain's setpgid into nodeid-init's process group")
	code := holder.wait(t, 20*time.Second)
	_ = os.Remove(fast)
	out := holder.out.String()
	t.Logf("round %d: holder exited %d; %s", round, code, lineWith(out, "processes of the command"))
	if !strings.Contains(out, "lease released") {
		t.Errorf("round %d: no release after CMD exited 0 (exit %d):\n%s", round, code, out)
	}
	if grows(v1log, 300*time.Millisecond) {
		t.Errorf("round %d: the holder exited %d, yet the command's fork-and-exit daemon still appends to %s", round, code, v1log)
		return
	}
	succ := c.runTask("succ")
	_, v, graceful := succ.identity(t, 20*time.Second)
	if v == 2 && grows(v2log, 300*time.Millisecond) {
		t.Errorf("round %d: the successor holds node 0 at v2 (previous_graceful=%v) and its %s still grows: writes of the released v1's command", round, graceful, v2log)
	}
}

// rootHelperC tries to become root for good (setuid(0) in a setuid-root
// binary: real, effective and saved uid 0, as su, sudo or a privileged
// helper leave it), writes the kernel's refusal to stderr ("setuid: EPERM")
// and runs on either way: writes its pid to argv[2], then appends to argv[1]
// every 20 ms.
const rootHelperC = `#include <stdio.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
int main(int argc,char**argv){
  if(setuid(0)!=0) fprintf(stderr,"setuid: %s\n", errno==EPERM?"EPERM":strerror(errno));
  FILE*p=fopen(argv[2],"w"); fprintf(p,"%d\n",getpid()); fclose(p);
  for(long n=0;;n++){ int fd=open(argv[1],O_WRONLY|O_APPEND|O_CREAT,0644); if(fd>=0){dprintf(fd,"root %ld\n",n); close(fd);} usleep(20000); }
}
`

// Review r26i (invariant 4; docs/design.md: only "a process stuck in the
// kernel on a hung NFS server" survives the kill): nodeid-init running as an
// unprivileged user (USER in the image) cannot SIGKILL a process of the
// command that became another user: kill gets EPERM. The fix: a non-root
// nodeid-init starts CMD with no_new_privs, so the setuid bit raises nothing
// and the helper stays nodeid-init's user.
//
// Schedule (L = 2 s, R = 500 ms): setpriv --reuid 65534 nodeid-init run --
// sh: reports, starts the setuid-root helper (it tries setuid(0) and appends
// to $NODE_DATA_DIR/root.log), sleeps; the test overwrites node 0's object
// with task abc's; the renewal gets 412: fence, stop sequence, exit 3.
// Expected: setuid(0) refused (EPERM), root.log no longer grows once the
// loss is handled.
func TestReviewR26iUnprivilegedSupervisorsSetuidHelperStaysItsUserAndDiesOnALoss(t *testing.T) {
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
	assertRefused(t, pidFile+".err", "setuid: EPERM", "the helper's setuid(0)")
	body := fmt.Sprintf(`{"taskId":"abc","timestamp":%d,"nodeInstance":{"id":%d,"version":%d},"knownVersionMappings":{"mappingsByNodeId":{}}}`,
		time.Now().Add(time.Hour).UnixMilli(), id, v)
	putObject(t, c.srv, "e2e/"+nodeid.LeaseKey("", id), body, map[string]string{"taskid": "abc", "version": fmt.Sprint(v), "acquirable": "true"})
	code := holder.wait(t, 20*time.Second)
	out := holder.out.String()
	if code != 3 {
		t.Errorf("exit code %d after the lease was overwritten, want 3:\n%s", code, out)
	}
	if grows(v1log, 300*time.Millisecond) {
		t.Errorf("node 0 is another task's (taskId abc) and nodeid-init exited %d (%q; %q), yet the command's setuid-root helper still appends to %s",
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
