package main

import (
	"context"
	"fmt"
	"io"

	"github.com/nodeid/nodeid/nodeid"
)

func cmdBootstrap(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	s, repo, log, err := adminSession(ctx, "bootstrap", args, stdout, stderr, changeFlags)
	if err != nil {
		return err
	}
	if err := explicitSize(s, "bootstrap"); err != nil {
		return err
	}
	listing, err := repo.List(ctx)
	if err != nil {
		return err
	}
	var missing []int
	for id := 0; id < s.clusterSize; id++ {
		if _, ok := listing.Slot(id); !ok {
			missing = append(missing, id)
		}
	}
	where := fmt.Sprintf("s3://%s/%s", s.bucket, s.prefix)
	plan := fmt.Sprintf("create %d lease objects in %s (%s)", len(missing), where, idRanges(missing))
	if !listing.MarkerSeen {
		plan += ", and the cluster marker " + nodeid.MarkerKeyName
	}
	if s.dryRun {
		if len(missing) == 0 && listing.MarkerSeen {
			fmt.Fprintf(stdout, "dry run: nothing to create in %s: node IDs 0..%d and the cluster marker exist\n", where, s.clusterSize-1)
		} else if len(missing) == 0 {
			fmt.Fprintf(stdout, "dry run: would create the cluster marker %s in %s (node IDs 0..%d exist)\n", nodeid.MarkerKeyName, where, s.clusterSize-1)
		} else {
			fmt.Fprintf(stdout, "dry run: would %s\n", plan)
		}
		return nil
	}
	if len(missing) > largeChange && !s.yes {
		return usagef("bootstrap would %s: more than %d; add --yes if that is meant", plan, largeChange)
	}
	if err := s.probe(ctx, repo, log); err != nil {
		return err
	}
	if err := nodeid.Initialize(ctx, repo, s.clusterSize, s.taskID, s.leaseDuration); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "cluster of %d node IDs ready in %s\n", s.clusterSize, where)
	return nil
}
