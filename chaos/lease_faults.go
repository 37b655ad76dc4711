package chaos

// Experiments 1 and 2: the lease object is changed from outside.

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

func runLeaseOverwrite(ctx context.Context, c *Cluster, r *Result) error {
	const node = 2
	old, v, err := setupVictim(ctx, c, node)
	if err != nil {
		return err
	}
	l, err := c.Lease(ctx, node)
	if err != nil {
		return err
	}
	if l.TaskID != old.Name || int64(l.Instance.Version) != v {
		return fmt.Errorf("lease of node %d says %s v%d, broker says %s v%d", node, l.TaskID, l.Instance.Version, old.Name, v)
	}
	body := fmt.Sprintf(`{"taskId":"abc","timestamp":%d,"nodeInstance":{"id":%d,"version":%d},"knownVersionMappings":{"mappingsByNodeId":{}}}`,
		time.Now().UnixMilli(), node, v)
	return breakLease(ctx, c, r, old, node, v, "copied", func() error {
		return c.PutObject(ctx, c.LeaseKey(node), body, map[string]string{"version": strconv.FormatInt(v, 10), "acquirable": "true", "taskid": "abc"})
	})
}

// breakLease runs fault on node's lease object right after its holder old
// renewed, then expects old to lose the lease (r.Detect) and a replacement
// to take the node with version v+1, copying the data.
func breakLease(ctx context.Context, c *Cluster, r *Result, old *Task, node int, v int64, note string, fault func() error) error {
	if err := old.AfterRenewal(ctx, 2*c.Timing.Lease); err != nil {
		return err
	}
	t0 := mono()
	if err := fault(); err != nil {
		return err
	}
	at, err := expectLoss(ctx, old, 3*c.Timing.Lease)
	if err != nil {
		return err
	}
	r.Detect = at - t0
	if _, err := expectReplacement(ctx, c, r, old, node, v, t0, false, 8*c.Timing.Lease); err != nil {
		return err
	}
	r.notef("node %d v%d -> v%d, %s", node, v, v+1, note)
	return sleep(ctx, c.Timing.Lease/2)
}

func runLeaseDelete(ctx context.Context, c *Cluster, r *Result) error {
	const node = 1
	old, v, err := setupVictim(ctx, c, node)
	if err != nil {
		return err
	}
	// Peers learn each other's versions by re-reading the leases every
	// MappingsRefreshInterval (L). Only then can the deleted object be
	// recreated with its version; see docs/chaos.md for an earlier delete.
	if err := sleep(ctx, 2*c.Timing.Lease); err != nil {
		return err
	}
	return breakLease(ctx, c, r, old, node, v, "after the object was recreated", func() error {
		return c.DeleteObject(ctx, c.LeaseKey(node))
	})
}
