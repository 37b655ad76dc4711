package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// groupExitTimeout bounds the wait for the command's other processes after
// SIGKILL. Only a process stuck in the kernel (D state, e.g. on a hung NFS
// server) takes longer; its writes may still land, so the lease is then left
// to expire instead of released.
const groupExitTimeout = 5 * time.Second

// becomeSubreaper makes the command's orphans (helpers whose parent died,
// daemons that left the process group with setsid) our children rather than
// init's, so run can find, kill and reap every process the command started.
func becomeSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// diesWithItsTree reports whether the kernel kills every process of the
// command when nodeid-init dies, even by SIGKILL: when nodeid-init is PID 1
// of its PID namespace, whose end kills everything in it, or the child of a
// minimal init that is PID 1 and exits with its child (ECS's
// initProcessEnabled runs docker-init, i.e. tini).
func diesWithItsTree() bool {
	if os.Getpid() == 1 {
		return true
	}
	if os.Getppid() != 1 {
		return false
	}
	b, _ := os.ReadFile("/proc/1/comm")
	switch strings.TrimSpace(string(b)) {
	case "docker-init", "tini", "dumb-init", "catatonit":
		return true
	}
	return false
}

// proc holds the fields of /proc/PID/stat that run needs.
type proc struct {
	pid, ppid, pgid, threads int
	state                    byte
}

// dead: a zombie has closed its files and unmapped its memory, so it can
// write nothing more. A zombie thread-group leader with live threads is not.
func (p proc) dead() bool {
	return (p.state == 'Z' || p.state == 'X' || p.state == 'x') && p.threads <= 1
}

func (p proc) String() string { return fmt.Sprintf("%d(%c)", p.pid, p.state) }

// errForeignProc: /proc was mounted for another PID namespace (e.g.
// `unshare --pid` without --mount-proc): its pids are not ours, and killing
// by them would hit the wrong processes or none.
var errForeignProc = errors.New("/proc belongs to another PID namespace (mount a new proc file system in this one)")

// procIsOurs reports whether /proc shows this process under its own pid.
func procIsOurs() bool {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return false
	}
	p, ok := parseStat(b)
	return ok && p.pid == os.Getpid()
}

func readProcs() ([]proc, error) {
	if !procIsOurs() {
		return nil, errForeignProc
	}
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, err
	}
	procs := make([]proc, 0, len(names))
	for _, n := range names {
		if n[0] < '0' || n[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + n + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		if p, ok := parseStat(b); ok {
			procs = append(procs, p)
		}
	}
	return procs, nil
}

// parseStat reads "pid (comm) state ppid pgrp ... num_threads ...";
// comm may contain spaces and parentheses, so split after the last ')'.
func parseStat(b []byte) (proc, bool) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 1 || end < open {
		return proc{}, false
	}
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 18 || len(f[0]) != 1 {
		return proc{}, false
	}
	var p proc
	var err [4]error
	p.pid, err[0] = strconv.Atoi(strings.TrimSpace(string(b[:open])))
	p.ppid, err[1] = strconv.Atoi(f[1])
	p.pgid, err[2] = strconv.Atoi(f[2])
	p.threads, err[3] = strconv.Atoi(f[17])
	p.state = f[0][0]
	return p, err == [4]error{}
}

// leftovers are the live processes of the command: members of its process
// group, and every descendant of this process (all of them were started by
// the command, the only child run starts).
func leftovers(procs []proc, self, pgid int) []proc {
	children := map[int][]proc{}
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p)
	}
	seen := map[int]bool{self: true}
	var out []proc
	add := func(p proc) {
		if !seen[p.pid] {
			seen[p.pid] = true
			if !p.dead() {
				out = append(out, p)
			}
		}
	}
	queue := []int{self}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if !seen[c.pid] {
				add(c)
				queue = append(queue, c.pid)
			}
		}
	}
	for _, p := range procs {
		if p.pgid == pgid {
			add(p)
		}
	}
	return out
}

// descendantGroups are the process groups of every descendant of self,
// zombies included (a zombie's stat still names its group), but self's
// own: a daemon that runs as a chain of processes, each forking the next
// and exiting, is never listed alive by a scan, but all of it keeps the
// group it made with its one setsid, and kill(-group) reaches every member
// at once (review r26h).
func descendantGroups(procs []proc, self int) []int {
	own := syscall.Getpgrp()
	children := map[int][]proc{}
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p)
	}
	var groups []int
	seen, queue := map[int]bool{self: true}, []int{self}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if seen[c.pid] {
				continue
			}
			seen[c.pid] = true
			queue = append(queue, c.pid)
			if c.pgid > 1 && c.pgid != own && !slices.Contains(groups, c.pgid) {
				groups = append(groups, c.pgid)
			}
		}
	}
	return groups
}

// killProcs SIGKILLs what a scan found of the command: the processes
// left alive, and the process groups of every descendant. As PID 1 of a
// PID namespace it first SIGKILLs every other process there (kill(-1)):
// one system call the kernel applies to the whole namespace, which no
// fork can race; otherwise a tree that forks faster than /proc can be read
// and starts a new session at each generation can escape the scan
// (docs/cli.md, the stop sequence).
func killProcs(procs, left []proc) {
	if os.Getpid() == 1 {
		_ = syscall.Kill(-1, syscall.SIGKILL)
	}
	for _, g := range descendantGroups(procs, os.Getpid()) {
		_ = syscall.Kill(-g, syscall.SIGKILL)
	}
	for _, p := range left {
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
	}
}

// reapZombies reaps every zombie child of this process except keep (the
// command, which exec.Cmd.Wait reaps), and reports whether keep was seen
// dead (it may hide others until Wait has reaped it).
//
// It asks the kernel, not /proc: under `unshare --pid` without a fresh
// /proc mount, /proc shows the pids of another namespace, and no entry
// there has our pid as its parent. waitid(WNOWAIT) names a dead child
// without reaping it, so keep's status stays for Wait.
func reapZombies(keep int) (keepDead bool) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		if err == unix.EINTR {
			continue
		}
		pid := siginfoPid(&info)
		if err != nil || pid == 0 {
			return false // no child, or none dead
		}
		if pid == keep {
			return true
		}
		var ws unix.WaitStatus
		if _, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); err != nil && err != unix.EINTR {
			return false
		}
	}
}

// siginfoPid is si_pid of a SIGCHLD siginfo: after three int32s, in a union
// aligned like a pointer.
func siginfoPid(info *unix.Siginfo) int {
	off := uintptr(12)
	if unsafe.Sizeof(uintptr(0)) == 8 {
		off = 16
	}
	return int(*(*int32)(unsafe.Add(unsafe.Pointer(info), off)))
}

// reapOrphans reaps, while the command runs, the orphans reparented to this
// subreaper (or PID 1), so their zombies do not pile up. It returns a
// function that stops it.
func reapOrphans(leader int) (stop func()) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		var retry <-chan time.Time
		for {
			// A dead leader hides the others until Wait reaps it: look
			// again shortly. SIGCHLDs coalesce, so each look reaps all.
			retry = nil
			if reapZombies(leader) {
				retry = time.After(50 * time.Millisecond)
			}
			select {
			case <-done:
				return
			case <-sigs:
			case <-retry:
			}
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(done)
		<-finished
	}
}

// signalCommand sends sig to the command's process group, and to the leader
// itself if it has left that group (once only: a second SIGINT may mean
// "quit now" to it).
func signalCommand(pid int, sig syscall.Signal) {
	_ = syscall.Kill(-pid, sig)
	if pg, err := syscall.Getpgid(pid); err == nil && pg != pid {
		_ = syscall.Kill(pid, sig)
	}
}

// killTree SIGKILLs, once and at once, the command's process group and every
// descendant of this process, the leader included wherever its group.
func killTree(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	if os.Getpid() == 1 {
		_ = syscall.Kill(-1, syscall.SIGKILL)
	}
	procs, err := readProcs()
	if err != nil {
		return // killLeftovers reports it
	}
	killProcs(procs, leftovers(procs, os.Getpid(), pgid))
}

// killLeftovers SIGKILLs the command's process group (pgid is the command's
// pid) and every other process the command started, the command itself
// included, reaps them all but the command (exec.Cmd.Wait reaps it), and
// returns once none is alive, or an error naming the survivors after
// timeout. It returns how many live processes the first look found.
func killLeftovers(pgid int, timeout time.Duration) (int, error) {
	self := os.Getpid()
	deadline := time.Now().Add(timeout)
	pause := 5 * time.Millisecond
	found, quiet := -1, 0
	for {
		_ = syscall.Kill(-pgid, syscall.SIGKILL) // whatever /proc says
		procs, err := readProcs()
		if err != nil {
			return found, fmt.Errorf("cannot list processes: %w", err)
		}
		left := leftovers(procs, self, pgid)
		if found < 0 {
			found = len(left)
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		killProcs(procs, left)
		reapZombies(pgid)
		if len(left) == 0 {
			// Look twice: one pass over /proc is not atomic, and a process
			// read before its parent died may have been missed.
			if quiet++; quiet == 2 {
				return found, nil
			}
			continue
		}
		quiet = 0
		if time.Now().After(deadline) {
			return found, fmt.Errorf("%d process(es) of the command still alive %v after SIGKILL: %v", len(left), timeout, left)
		}
		time.Sleep(pause)
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// syncData makes the command's writes durable before a release lets a
// successor hard-link them. syncfs covers the whole file system of the data
// directory d (the one the successor links from) and reports write-back
// errors: only those after d was opened (errseq, Linux 5.8), so d is the
// descriptor opened before the command started (openDataDirBounded).
func syncData(d *os.File) error {
	if d == nil {
		return nil
	}
	if err := unix.Syncfs(int(d.Fd())); err != nil {
		return &os.PathError{Op: "syncfs", Path: d.Name(), Err: err}
	}
	return nil
}
