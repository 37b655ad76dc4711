package chaos

// Experiment 9: tasks whose wall clocks disagree by hours.

import (
	"context"
	"fmt"
	"syscall"
	"time"
)

func runClockSkew(ctx context.Context, c *Cluster, r *Result) error {
	offsets := []string{"-1h", "0s", "1h"}
	var started []*Task
	for i, off := range offsets {
		t, err := c.Start(fmt.Sprintf("skew%s", off), "NODEID_TEST_CLOCK_OFFSET="+off)
		if err != nil {
			return err
		}
		started = append(started, t)
		if _, err := c.WaitHolders(ctx, i+1, 30*time.Second); err != nil {
			return err
		}
	}
	spare, err := c.Start("spare+1h", "NODEID_TEST_CLOCK_OFFSET=1h")
	if err != nil {
		return err
	}
	holders := c.Holders()
	if err := sleep(ctx, 4*c.Timing.Lease); err != nil {
		return err
	}
	if _, ok := spare.Identity(); ok {
		id, _ := spare.Identity()
		return fmt.Errorf("the +1 h spare took node %d v%d while every holder was alive", id.Node, id.Version)
	}
	for _, t := range started {
		if !t.Running() {
			code, _, _ := t.Exit()
			return fmt.Errorf("skewed holder %s exited %d", t.Name, code)
		}
	}
	old := started[0] // the -1 h holder
	id, _ := old.Identity()
	if holders[id.Node] != old {
		return fmt.Errorf("holder map inconsistent for %s", old.Name)
	}
	if err := old.AfterRenewal(ctx, 2*c.Timing.Lease); err != nil {
		return err
	}
	t0 := mono()
	if err := old.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	if _, err := expectReplacement(ctx, c, r, old, id.Node, id.Version, t0, false, 8*c.Timing.Lease); err != nil {
		return err
	}
	r.notef("no takeover in %v with clocks at -1h/0/+1h; after the kill the +1h spare took node %d v%d", 4*c.Timing.Lease, id.Node, id.Version+1)
	return sleep(ctx, c.Timing.Lease/2)
}
