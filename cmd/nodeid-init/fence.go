package main

import (
	"sync/atomic"

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
}

// kill is OnFence: mark the loss, then kill whatever runs.
func (f *fence) kill(*nodeid.LostError) {
	f.fenced.Store(true)
	if pg := int(f.pgid.Load()); pg > 0 {
		killTree(pg)
	}
}

// started publishes the command's pid right after it started. A loss that
// came between the start and this store saw no pgid: it is killed here.
// (Both sides store, then load, sequentially consistent: at least one of
// them sees the other.)
func (f *fence) started(pid int) {
	f.pgid.Store(int64(pid))
	if f.fenced.Load() {
		killTree(pid)
	}
}

// stopped forgets the pgid once every process of the command is dead and
// reaped: the pid may be reused.
func (f *fence) stopped() { f.pgid.Store(0) }

// lost reports whether the fence has fired.
func (f *fence) lost() bool { return f.fenced.Load() }
