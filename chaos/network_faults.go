package chaos

// Experiments 5 and 6: the holder's path to S3 is cut or degraded.

import (
	"context"
	"fmt"
	"time"

	"github.com/nodeid/nodeid/internal/faultproxy"
)

func runBlackhole(ctx context.Context, c *Cluster, r *Result) error {
	const node = 1
	old, v, t0, err := renewedVictim(ctx, c, node)
	if err != nil {
		return err
	}
	old.Proxy.Set(faultproxy.Fault{Blackhole: true})
	at, err := expectLoss(ctx, old, 2*c.Timing.Lease)
	if err != nil {
		return err
	}
	r.Detect = at - t0
	if budget := c.Timing.Lease - c.Timing.Margin() + c.Timing.Renew; r.Detect > budget {
		r.notef("detection %v exceeds L-m+R = %v", r.Detect.Round(time.Millisecond), budget)
	}
	if _, err := expectReplacement(ctx, c, r, old, node, v, t0, false, 8*c.Timing.Lease); err != nil {
		return err
	}
	if err := sleep(ctx, 3*c.Timing.Lease-(mono()-t0)); err != nil {
		return err
	}
	old.Proxy.Pass()
	r.notef("%d requests held by the blackhole", old.Proxy.Stats().Blackholed)
	return sleep(ctx, c.Timing.Lease/2)
}

func runLatency503(ctx context.Context, c *Cluster, r *Result) error {
	holders, err := setup(ctx, c, 1)
	if err != nil {
		return err
	}
	before := map[int]int64{}
	for n, t := range holders {
		id, _ := t.Identity()
		before[n] = id.Version
	}
	for i, t := range c.Tasks() {
		t.Proxy.Set(faultproxy.Fault{Latency: 20 * time.Millisecond, Jitter: 100 * time.Millisecond,
			Status: 503, Probability: 0.1, Seed: uint64(i + 1)})
	}
	if err := sleep(ctx, 5*c.Timing.Lease); err != nil {
		return err
	}
	injected, delayed := 0, 0
	for _, t := range c.Tasks() {
		st := t.Proxy.Stats()
		injected += st.Injected
		delayed += st.Delayed
		t.Proxy.Pass()
	}
	for n, t := range holders {
		if !t.Running() {
			code, _, _ := t.Exit()
			return fmt.Errorf("holder %s of node %d exited %d under latency and 503s", t.Name, n, code)
		}
	}
	now := c.Holders()
	for n, v := range before {
		id, _ := now[n].Identity()
		if now[n] != holders[n] || id.Version != v {
			return fmt.Errorf("node %d changed hands under latency and 503s: v%d -> %s v%d", n, v, now[n].Name, id.Version)
		}
	}
	r.notef("%d answers were 503, %d requests delayed; no lease lost", injected, delayed)
	return nil
}
