package nodeid

// Adversarial review: the simulation with what its chaos lacks. Its tasks
// release only when the run ends, so releases never meet delayed,
// duplicated or lost requests. This variant adds voluntary releases (Close)
// during the chaos phase, and checks invariant 3: a successor that takes a
// lease as gracefully released must follow a tenure that really ended in a
// release (Close), not one that was lost, crashed or is still running.

import (
	"container/heap"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"testing/synctest"
	"time"
)

type reviewTenure struct {
	task *simTask
	inst NodeInstance
}

func reviewRunSim(t *testing.T, p simParams, trace *testing.T) []string {
	var violations []string
	synctest.Test(t, func(t *testing.T) {
		var tw testWriter
		w := &simWorld{p: p, rng: rand.New(rand.NewPCG(p.seed, 0x5eed)), wake: make(chan struct{}, 1),
			objects: map[int]*simObject{}, maxVersion: map[int]Version{}, deletedSince: map[int]bool{},
			size: p.clusterSize, start: time.Now(), clocksDone: make(chan struct{})}
		if trace != nil {
			tw = testWriter{trace}
			w.trace = tw
		}
		w.calmFrom = w.start.Add(p.chaosFor)
		end := w.calmFrom.Add(3*p.lease + p.lease/3)
		stop := make(chan struct{})
		w.chaos(stop)

		// Voluntary releases during the chaos phase.
		rrng := rand.New(rand.NewPCG(p.seed, 0xc105e))
		closed := map[*simTask]bool{}
		for at := w.start.Add(time.Second); at.Before(w.calmFrom); at = at.Add(time.Duration(rrng.Int64N(int64(3 * time.Second)))) {
			pick := rrng.IntN(1 << 20)
			w.schedule(at, "review: release", func() {
				var holders []*simTask
				for _, tk := range w.aliveTasks() {
					if tk.provider.Valid() {
						holders = append(holders, tk)
					}
				}
				if len(holders) == 0 {
					return
				}
				tk := holders[pick%len(holders)]
				closed[tk] = true
				tk.mu.Lock()
				tk.exited = true // ECS replaces it
				tk.mu.Unlock()
				w.log(fmt.Sprintf("review: %s releases %v", tk.name, tk.provider.Instance()))
				w.running.Add(1)
				go func() {
					defer w.running.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 3*p.lease)
					defer cancel()
					_ = tk.provider.Close(ctx)
				}()
			})
		}
		for i := 0; i < p.tasks; i++ {
			w.startTask(stop)
		}

		seenTenure := map[*simTask]bool{}
		var tenures []reviewTenure
		checkGraceful := func() {
			for _, tk := range w.tasks {
				inst := tk.provider.Instance()
				if inst.Version == 0 || seenTenure[tk] {
					continue
				}
				seenTenure[tk] = true
				if tk.provider.PreviousGracefullyShutdown() && !w.deletedSince[inst.ID] {
					// The tenure just below ours must have ended in a release.
					var prev *reviewTenure
					for i := range tenures {
						if tenures[i].inst.ID == inst.ID && tenures[i].inst.Version < inst.Version &&
							(prev == nil || tenures[i].inst.Version > prev.inst.Version) {
							prev = &tenures[i]
						}
					}
					if prev != nil && !closed[prev.task] && !stoppedByRunEnd(prev.task) {
						msg := fmt.Sprintf("t=%v: %s took %v as gracefully released, but its predecessor %s (%v) did not release: err=%v valid=%v",
							time.Since(w.start).Round(time.Millisecond), tk.name, inst, prev.task.name, prev.inst, prev.task.provider.Err(), prev.task.provider.Valid())
						violations = append(violations, msg)
						w.log("VIOLATION " + msg)
					}
				}
				tenures = append(tenures, reviewTenure{task: tk, inst: inst})
			}
		}

		liveChecked, stopped := false, false
		for {
			synctest.Wait()
			w.route(time.Now())
			w.checkInvariants()
			checkGraceful()
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
				checkGraceful()
			}
		}
		w.running.Wait()
		close(w.clocksDone)
		violations = append(violations, w.violations...)
	})
	return violations
}

// stoppedByRunEnd: the task released at the end of the run (also a release).
func stoppedByRunEnd(t *simTask) bool {
	return t.provider.Err() == ErrClosed && t.provider.relErr == nil
}

func TestReviewSimulationWithReleases(t *testing.T) {
	seeds := 300
	if s := os.Getenv("REVIEW_SIM_SEEDS"); s != "" {
		seeds, _ = strconv.Atoi(s)
	}
	first := 1
	if s := os.Getenv("REVIEW_SIM_FIRST"); s != "" {
		first, _ = strconv.Atoi(s)
	}
	for seed := first; seed < first+seeds; seed++ {
		p := defaultSimParams(uint64(seed))
		if s := os.Getenv("REVIEW_SIM_SIZE"); s != "" {
			p.clusterSize, _ = strconv.Atoi(s)
		}
		if v := reviewRunSim(t, p, nil); len(v) > 0 {
			if os.Getenv("REVIEW_SIM_TRACE") != "" {
				reviewRunSim(t, p, t)
			}
			t.Fatalf("seed %d: %d violation(s), first: %s", seed, len(v), v[0])
		}
	}
}

// REVIEW_SIM_SEED=N replays one seed with its trace.
func TestReviewSimulationSeed(t *testing.T) {
	s := os.Getenv("REVIEW_SIM_SEED")
	if s == "" {
		t.Skip("set REVIEW_SIM_SEED")
	}
	seed, _ := strconv.Atoi(s)
	for _, v := range reviewRunSim(t, defaultSimParams(uint64(seed)), t) {
		t.Error(v)
	}
}
