package main

import (
	"os"
	"sync/atomic"
	"time"

	"github.com/nodeid/nodeid/nodeid"
)

// fence kills the command's tree the moment the lease is lost. It is the
// provider's OnFence: it runs before the loss is logged or written to the
// lease file, and waits on nothing but the kernel (kill(2) and /proc), so a
// stalled stderr or a hung file system cannot delay it. It holds no lock:
// the command's pgid and the loss are published through atomics.
type fence struct {
	pgid   atomic.Int64 // the command's pid = pgid once started, else 0
	fenced atomic.Bool  // the lease was lost
	// leader is the command itself, signalled through its pidfd: it may
	// have left its group, and /proc may be another PID namespace's (then
	// the group and the leader are all the fence can find). A pidfd cannot
	// hit another process once the leader is reaped (review r26f).
	leader atomic.Pointer[os.Process]
}

// fenceWait bounds the fence's wait for the killed tree to die. Death by
// SIGKILL takes milliseconds; a process stuck in the kernel longer is the
// stop sequence's to report (it waits groupExitTimeout more).
const fenceWait = time.Second

// kill is OnFence: mark the loss, then kill whatever runs and wait, at
// most fenceWait, until it is dead. Only then may the loss be logged.
func (f *fence) kill(*nodeid.LostError) {
	f.fenced.Store(true)
	if p := f.leader.Load(); p != nil {
		_ = p.Kill()
	}
	if pg := int(f.pgid.Load()); pg > 0 {
		killTree(pg)
		awaitTreeDead(pg, fenceWait)
	}
}

// awaitTreeDead polls /proc, killing again what it finds, until no process
// of the command is alive (a zombie is dead: it writes nothing) or timeout
// has passed. It neither reaps (run does, in its stop sequence) nor logs.
func awaitTreeDead(pgid int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	quiet := 0
	for pause := time.Millisecond; ; pause = min(2*pause, 20*time.Millisecond) {
		procs, err := readProcs()
		if err != nil {
			return // the stop sequence reports it
		}
		left := leftovers(procs, os.Getpid(), pgid)
		killProcs(procs, left) // also when none is alive: a zombie names its group
		if len(left) == 0 {
			// Look twice, as killLeftovers does: one pass over /proc is
			// not atomic, and a process whose parent died mid-scan may
			// have been missed (the exit on a hang follows this wait).
			if quiet++; quiet == 2 {
				return
			}
			continue
		}
		quiet = 0
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(pause)
	}
}

// started publishes the command's pid right after it started. A loss that
// came between the start and this store saw no pgid: it is killed here.
// (Both sides store, then load, sequentially consistent: at least one of
// them sees the other.)
func (f *fence) started(p *os.Process) {
	f.leader.Store(p)
	f.pgid.Store(int64(p.Pid))
	if f.fenced.Load() {
		_ = p.Kill()
		killTree(p.Pid)
	}
}

// stopped forgets the pgid once every process of the command is dead and
// reaped: the pid may be reused.
func (f *fence) stopped() { f.pgid.Store(0); f.leader.Store(nil) }
