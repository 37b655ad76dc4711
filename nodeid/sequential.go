package nodeid

import (
	"context"
	"time"
)

// trySequential is one pass of the anchor's strategy, kept as a baseline for
// benchmarks: IDs in order 0..N-1, a GET and, if free, a conditional PUT
// each; the caller backs off exponentially (1 s doubling to 30 s) after a
// full pass. Expiry is judged by the same safe rules as the default.
func (p *Provider) trySequential(ctx context.Context) (passResult, error) {
	ictx, cancel := context.WithTimeout(ctx, time.Duration(p.clusterSize()+2)*p.cfg.RequestTimeout)
	err := Initialize(ictx, p.repo, p.clusterSize(), p.cfg.TaskID, p.cfg.LeaseDuration)
	cancel()
	if err != nil {
		return passResult{}, err
	}
	if err := p.checkClusterLease(ctx); err != nil {
		return passResult{}, err
	}
	held := 0
	for _, id := range p.allowedIDs() {
		rec, err := p.get(ctx, id)
		arrived := p.cfg.Clock.Now()
		if err != nil {
			if IsPermanent(err) {
				return passResult{}, err
			}
			continue
		}
		p.seen.see(id, rec.ETag, arrived)
		p.learn(rec.Lease)
		v := p.judge(ctx, rec, arrived)
		p.logVerdict(rec, v)
		if !v.Free {
			held++
			continue
		}
		if inst, ok := p.take(ctx, rec, v.Graceful); ok {
			return passResult{inst: inst, taken: true}, nil
		}
	}
	return passResult{held: held}, nil
}
