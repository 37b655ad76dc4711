package nodeid_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// A task whose lease duration is longer than the cluster's (recorded in the
// marker) must not take a node ID: waiters judge an object that no longer
// records its holder's duration by the cluster's, and would take its lease
// while it still acts. Acquire refuses before writing anything (issue 28:
// the check in the default strategy's pass survived its removal).
func TestAcquireRefusesALeaseLongerThanTheClusters(t *testing.T) {
	for _, strategy := range []nodeid.AcquireStrategy{nodeid.StrategySpread, nodeid.StrategySequential} {
		t.Run(string(strategy), func(t *testing.T) {
			srv := s3test.NewFake(t)
			repo := newRepo(t, srv, "")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := nodeid.Initialize(ctx, repo, 1, "boot", 2*time.Second); err != nil {
				t.Fatal(err)
			}
			before, err := repo.Get(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			cfg := doubled(fastConfig(t, "long", 1, newLossRecorder())) // L = 4 s
			cfg.Strategy = strategy
			_, err = newProvider(t, repo, cfg).Acquire(ctx)
			if !errors.Is(err, nodeid.ErrInvalidConfig) {
				t.Fatalf("Acquire with L = 4s in a 2s cluster: %v, want ErrInvalidConfig", err)
			}
			if after, err := repo.Get(ctx, 0); err != nil || after.ETag != before.ETag {
				t.Errorf("node 0 written by a refused task: %+v, %v", after.Lease, err)
			}
		})
	}
}
