package nodeid

import (
	"container/heap"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// The simulation of sim_test.go, with one change the design allows: tasks
// run with different lease durations (each task's L is 3 s or 9 s; a waiter
// "uses the larger of the holder's and its own"). sim_test.go gives every
// task the same L, so it cannot see where a holder's duration gets lost.

// startTaskWithLease starts a task whose Config has lease duration L.
func (w *simWorld) startTaskWithLease(stop <-chan struct{}, L time.Duration) {
	saved := w.p.lease
	w.p.lease = L // read by w.config inside startTask only
	w.log(fmt.Sprintf("next task: L=%v", L))
	w.startTask(stop)
	w.p.lease = saved
}

func (w *simWorld) pickLease() time.Duration {
	if w.rng.IntN(2) == 0 {
		return w.p.lease / 3
	}
	return w.p.lease
}

// chaosMixed is chaos with replacements of mixed lease durations; outside
// overwrites and deletes only when outside is set.
func (w *simWorld) chaosMixed(stop <-chan struct{}, outside bool) {
	for at := w.start.Add(2 * time.Second); at.Before(w.calmFrom); at = at.Add(time.Duration(w.rng.Int64N(int64(6 * time.Second)))) {
		kind := w.rng.IntN(100)
		pick := w.rng.IntN(1 << 20)
		dur := w.p.lease/6 + time.Duration(w.rng.Int64N(int64(2*w.p.lease/3)))
		id := w.rng.IntN(4)
		w.schedule(at, "chaos", func() {
			alive := w.aliveTasks()
			if len(alive) == 0 {
				return
			}
			t := alive[pick%len(alive)]
			switch {
			case kind < 30:
				t.mu.Lock()
				t.pausedUntil = time.Now().Add(dur)
				t.mu.Unlock()
				w.schedule(time.Now().Add(dur), "resume "+t.name, func() { w.resume(t) })
				w.log(fmt.Sprintf("chaos: pause %s for %v", t.name, dur))
			case kind < 45:
				t.mu.Lock()
				t.dead, t.exited = true, true
				t.mu.Unlock()
				t.cancel()
				w.log("chaos: crash " + t.name)
			case kind < 60 && outside:
				w.log("chaos: " + w.outsideWrite(id%w.size, time.Now(), false))
			case kind < 65 && outside:
				w.log("chaos: " + w.outsideWrite(id%w.size, time.Now(), true))
			}
		})
	}
	for at := w.start.Add(time.Second); at.Before(w.calmFrom.Add(w.p.lease)); at = at.Add(time.Second) {
		w.schedule(at, "replace", func() {
			for len(w.aliveTasks()) < w.p.tasks {
				w.startTaskWithLease(stop, w.pickLease())
			}
		})
	}
}

// runSimMixed is runSim with chaosMixed; p.lease is the longest L.
func runSimMixed(t *testing.T, p simParams, outside bool) simResult {
	return runSimMixedTrace(t, p, outside, nil)
}

func runSimMixedTrace(t *testing.T, p simParams, outside bool, trace io.Writer) simResult {
	var res simResult
	synctest.Test(t, func(t *testing.T) {
		w := &simWorld{p: p, rng: rand.New(rand.NewPCG(p.seed, 0x5eed)), wake: make(chan struct{}, 1),
			objects: map[int]*simObject{}, maxVersion: map[int]Version{}, deletedSince: map[int]bool{},
			size: p.clusterSize, trace: trace, start: time.Now(), clocksDone: make(chan struct{})}
		w.calmFrom = w.start.Add(p.chaosFor)
		end := w.calmFrom.Add(3*p.lease + p.lease/3)
		stop := make(chan struct{})
		w.chaosMixed(stop, outside)
		for i := 0; i < p.tasks; i++ {
			w.startTaskWithLease(stop, w.pickLease())
		}
		liveChecked, stopped := false, false
		for {
			synctest.Wait()
			w.route(time.Now())
			w.checkInvariants()
			if !liveChecked && !time.Now().Before(end) {
				liveChecked = true
			}
			if liveChecked && !stopped {
				stopped = true
				close(stop)
				for _, tk := range w.tasks {
					tk.cancel()
				}
			}
			if stopped && w.live.Load() == 0 && len(w.events) == 0 {
				break
			}
			if time.Since(end) > 10*p.lease && !w.wedged {
				w.wedged = true
				for _, tk := range w.tasks {
					tk.mu.Lock()
					tk.dead = true
					tk.mu.Unlock()
				}
			}
			var next <-chan time.Time
			if len(w.events) > 0 {
				next = time.After(time.Until(w.events[0].at))
			} else if !liveChecked {
				next = time.After(time.Until(end))
			} else {
				next = time.After(w.p.lease)
			}
			select {
			case <-w.wake:
				continue
			case <-next:
			}
			for len(w.events) > 0 && !w.events[0].at.After(time.Now()) {
				e := heap.Pop(&w.events).(*simEvent)
				w.steps++
				e.apply()
				synctest.Wait()
				w.route(time.Now())
				w.checkInvariants()
			}
		}
		w.running.Wait()
		close(w.clocksDone)
		res = simResult{violations: w.violations, steps: w.steps, hash: w.hash}
	})
	return res
}

func mixedParams(seed uint64) simParams {
	p := defaultSimParams(seed)
	p.lease = 9 * time.Second // tasks get 3 s or 9 s
	p.chaosFor = 60 * time.Second
	return p
}

// Pauses, crashes, lost and duplicated requests, no outside writes: mixed
// lease durations keep one holder per ID (checked sound: every write
// carries its writer's duration, and a waiter uses the larger).
func TestReview2SimMixedLeaseDurationsSound(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		res := runSimMixed(t, mixedParams(seed), false)
		for _, v := range res.violations {
			if strings.Contains(v, "at once") {
				t.Fatalf("seed %d: %s", seed, v)
			}
		}
	}
}

// With outside overwrites and deletes (sim_test.go's chaos), the object
// then carries the outsider's or the recreator's duration, not the
// holder's: a waiter with a shorter lease takes the ID while the holder,
// whose next renewal is not yet due (or which is paused), is still valid.
// Replay: go test ./nodeid -run TestReview2SimMixedSeed -sim.seed=8 -v
func TestReview2SimMixedLeaseDurationsWithOutsideWrites(t *testing.T) {
	for seed := uint64(1); seed <= 150; seed++ {
		res := runSimMixed(t, mixedParams(seed), true)
		for _, v := range res.violations {
			if strings.Contains(v, "at once") {
				t.Fatalf("seed %d: %s\nreplay: go test ./nodeid -run 'TestReview2SimMixedSeed$' -sim.seed=%d -v", seed, v, seed)
			}
		}
	}
}

// TestReview2SimMixedSeed replays one seed with its trace: -sim.seed=N -v.
func TestReview2SimMixedSeed(t *testing.T) {
	if *simSeed < 0 {
		t.Skip("set -sim.seed=N to replay a seed")
	}
	res := runSimMixedTrace(t, mixedParams(uint64(*simSeed)), true, testWriter{t})
	for _, v := range res.violations {
		t.Error(v)
	}
}
