package datadir

import (
	"os"
	"sync"
	"sync/atomic"
)

// pool runs tasks on a bounded number of goroutines. Tasks add tasks; run
// returns once none is queued or running. The queue is last in, first out,
// so a directory's entries are done before the next directory is opened:
// that bounds the directories held open to about the number of workers
// times the depth.
type pool struct {
	mu     sync.Mutex
	cond   sync.Cond
	tasks  []func()
	active int // queued or running
}

func newPool() *pool {
	p := &pool{}
	p.cond.L = &p.mu
	return p
}

// run runs first and every task added meanwhile on n goroutines.
func (p *pool) run(n int, first func()) {
	p.add(first)
	var wg sync.WaitGroup
	for range max(n, 1) {
		wg.Go(p.work)
	}
	wg.Wait()
}

func (p *pool) add(f func()) {
	p.mu.Lock()
	p.active++
	p.tasks = append(p.tasks, f)
	p.mu.Unlock()
	p.cond.Signal()
}

func (p *pool) work() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		for len(p.tasks) == 0 && p.active > 0 {
			p.cond.Wait()
		}
		if p.active == 0 {
			p.cond.Broadcast()
			return
		}
		f := p.tasks[len(p.tasks)-1]
		p.tasks[len(p.tasks)-1] = nil
		p.tasks = p.tasks[:len(p.tasks)-1]
		p.mu.Unlock()
		f()
		p.mu.Lock()
		if p.active--; p.active == 0 {
			p.cond.Broadcast()
		}
	}
}

// dirID is a directory as first opened: its device and inode.
type dirID struct{ dev, ino uint64 }

// dirJob is a directory being walked (in the source, and the target where
// there is one). Within heldLevels of the top its descriptors stay open
// until every task below it has ended; then finish runs (once) and the
// parent is told. Deeper (deep), they are open only while a task uses them
// (acquire, release) and opened again from the deepest held ancestor when
// needed (see reopen): descriptors held do not grow with the depth.
type dirJob struct {
	parent   *dirJob
	src, dst *os.File
	name     string // in the parent
	rel      string // relative to the version directory; "" at the top
	pending  atomic.Int64
	finish   func(*dirJob)

	depth        int // 0 at the top
	deep         bool
	srcID, dstID dirID // a deep job's directories as first opened
	refsMu       sync.Mutex
	refs         int // tasks of a deep job using src and dst

	// Flags added when src and dst are reopened to be listed (O_NOATIME
	// where it was granted: see openKeepingAtime).
	srcFlags, dstFlags int

	mu    sync.Mutex
	queue []func() // batches of j's entries not started yet (see spread)
}

// spread queues the batches of j's entries and starts up to limit runners
// for them. Few per directory, so that the workers spread over directories:
// the kernel serialises creating entries in one directory (it holds the
// directory's lock across the round trips of lookup and create or link,
// on NFS too), while lookups and the other steps of a copy overlap.
func (j *dirJob) spread(p *pool, batches []func(), limit int) {
	j.mu.Lock()
	j.queue = append(j.queue, batches...)
	j.mu.Unlock()
	for range min(limit, len(batches)) {
		j.start()
		p.add(func() {
			defer j.done()
			for {
				j.mu.Lock()
				if len(j.queue) == 0 {
					j.mu.Unlock()
					return
				}
				f := j.queue[0]
				j.queue = j.queue[1:]
				j.mu.Unlock()
				f()
			}
		})
	}
}

// start counts one more task below j.
func (j *dirJob) start() { j.pending.Add(1) }

// done ends one task below j; the last one finishes j, then its parent.
func (j *dirJob) done() {
	for ; j != nil && j.pending.Add(-1) == 0; j = j.parent {
		if j.finish != nil {
			j.finish(j)
		}
	}
}

// batch is how many entries of one directory one task handles: a few, so
// that one large directory is still spread over the workers.
const batch = 8

// perDir is how many workers at most work in one directory at a time.
const perDir = 4
