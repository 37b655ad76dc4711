package chaos

// Experiments 3 and 4: the holder's processes are killed or stopped.

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/nodeid/nodeid/chaos/checker"
	"github.com/nodeid/nodeid/internal/poll"
)

func runKill9(ctx context.Context, c *Cluster, r *Result) error {
	const node = 1
	old, v, t0, err := renewedVictim(ctx, c, node)
	if err != nil {
		return err
	}
	id, _ := old.Identity()
	if err := old.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	if _, ok := old.Wait(5 * time.Second); !ok {
		return fmt.Errorf("%s survived SIGKILL", old.Name)
	}
	if err := poll.Until(ctx, 2*time.Second, pollEvery, "the orphaned broker to die (Pdeathsig)", func() bool { return !alive(id.PID) }); err != nil {
		return err
	}
	r.Detect = 0
	if _, err := expectReplacement(ctx, c, r, old, node, v, t0, false, 8*c.Timing.Lease); err != nil {
		return err
	}
	r.notef("node %d v%d -> v%d, copied", node, v, v+1)
	return sleep(ctx, c.Timing.Lease/2)
}

func runPause(ctx context.Context, c *Cluster, r *Result) error {
	const node = 0
	old, v, t0, err := renewedVictim(ctx, c, node)
	if err != nil {
		return err
	}
	if err := old.SignalAll(syscall.SIGSTOP); err != nil {
		return err
	}
	// Long enough for a replacement (L + 1 s by S3's clock, a poll, the
	// takeover and the first write) on a loaded machine; 2.5 L was not.
	pause := c.Timing.Lease * 4
	if _, err := expectReplacement(ctx, c, r, old, node, v, t0, false, pause); err != nil {
		old.SignalAll(syscall.SIGCONT)
		return fmt.Errorf("while %s was stopped: %w", old.Name, err)
	}
	if err := sleep(ctx, pause-(mono()-t0)); err != nil {
		return err
	}
	resumed := mono()
	if err := old.SignalAll(syscall.SIGCONT); err != nil {
		return err
	}
	at, err := expectLoss(ctx, old, 2*c.Timing.Lease)
	if err != nil {
		return err
	}
	r.Detect = at - resumed
	stoppedItself := false
	for _, e := range old.Events() {
		if e.Kind == checker.KindWrite && time.Duration(e.Mono) > resumed {
			return fmt.Errorf("%s wrote seq %d after it was resumed", old.Name, e.Seq)
		}
		if e.Kind == checker.KindStop && time.Duration(e.Mono) > resumed {
			stoppedItself = true
			r.notef("resumed broker stopped itself: %s", e.Reason)
		}
	}
	if !stoppedItself {
		r.notef("resumed broker was killed by its supervisor before its next write")
	}
	r.notef("no write after resume; node %d v%d -> v%d", node, v, v+1)
	return sleep(ctx, c.Timing.Lease/2)
}
