package chaos

// Experiments 7 and 8: many tasks start at once, or replace each other in a
// rolling deployment.

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/nodeid/nodeid/internal/poll"
)

func runRollingDeploy(ctx context.Context, c *Cluster, r *Result) error {
	if _, err := c.StartN("old", c.Size); err != nil {
		return err
	}
	holders, err := c.WaitHolders(ctx, c.Size, 30*time.Second)
	if err != nil {
		return err
	}
	if _, err := c.StartN("new", c.Size); err != nil {
		return err
	}
	if err := sleep(ctx, 2*c.Timing.Poll); err != nil {
		return err
	}
	var worst time.Duration
	for node := range c.Size {
		old, v, err := victim(holders, node)
		if err != nil {
			return err
		}
		t0 := mono()
		if err := old.Signal(syscall.SIGTERM); err != nil {
			return err
		}
		code, ok := old.Wait(10 * time.Second)
		if !ok || code != 0 {
			return fmt.Errorf("%s after SIGTERM: exited=%v code %d, want a clean exit 0", old.Name, ok, code)
		}
		if !old.LogHas("command exited, lease released") {
			return fmt.Errorf("%s did not release its lease", old.Name)
		}
		who, err := expectReplacement(ctx, c, r, old, node, v, t0, true, 5*time.Second)
		if err != nil {
			return err
		}
		if who.Name[:3] != "new" {
			return fmt.Errorf("node %d went to %s, not a new task", node, who.Name)
		}
		worst = max(worst, r.Replace)
		r.notef("node %d: %v", node, r.Replace.Round(10*time.Millisecond))
		if err := sleep(ctx, c.Timing.Renew); err != nil {
			return err
		}
	}
	r.Replace = worst
	return nil
}

func runStartStorm(ctx context.Context, c *Cluster, r *Result) error {
	return startStorm(ctx, c, r)
}

func runStartStormSkipProbe(ctx context.Context, c *Cluster, r *Result) error {
	return startStorm(ctx, c, r, "NODEID_SKIP_PROBE=true")
}

// startStorm starts Size tasks at once and waits until all hold, failing
// early when a task exits.
func startStorm(ctx context.Context, c *Cluster, r *Result, env ...string) error {
	t0 := mono()
	if _, err := c.StartN("task", c.Size, append([]string{"CHAOS_WRITE_INTERVAL=250ms"}, env...)...); err != nil {
		return err
	}
	var exited []*Task
	err := poll.Until(ctx, 60*time.Second, pollEvery, fmt.Sprintf("%d holders", c.Size), func() bool {
		exited = exited[:0]
		for _, t := range c.Tasks() {
			if !t.Running() {
				exited = append(exited, t)
			}
		}
		return len(exited) > 0 || len(c.Holders()) >= c.Size
	})
	if len(exited) > 0 {
		// Let the others finish starting, to report the whole damage.
		sleep(ctx, 3*time.Second)
		why := map[string]int{}
		n := 0
		for _, t := range c.Tasks() {
			if code, _, ok := t.Exit(); ok {
				n++
				why[fmt.Sprintf("exit %d: %s", code, lastLine(t.Log()))]++
			}
		}
		for w, k := range why {
			r.notef("%d× %s", k, w)
		}
		return fmt.Errorf("%d of %d tasks exited during the storm (%d held)", n, c.Size, len(c.Holders()))
	}
	if err != nil {
		return fmt.Errorf("%w (%d held)", err, len(c.Holders()))
	}
	r.Replace = mono() - t0
	holders := c.Holders()
	for n, t := range holders {
		id, _ := t.Identity()
		if id.Version != 1 {
			return fmt.Errorf("%s got node %d v%d on an empty bucket, want v1", t.Name, n, id.Version)
		}
	}
	if err := sleep(ctx, c.Timing.Lease); err != nil {
		return err
	}
	for _, t := range c.Tasks() {
		if !t.Running() {
			code, _, _ := t.Exit()
			return fmt.Errorf("%s exited %d during the storm", t.Name, code)
		}
	}
	r.notef("%d tasks hold %d distinct IDs, all v1", len(holders), len(holders))
	return nil
}

// lastLine returns the last line of a log, shortened.
func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}
