package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/nodeid/nodeid/nodeid"
)

// scaleChange is what scale does to one node ID.
type scaleChange struct {
	id     int
	what   string
	fences bool // a live holder loses its lease
}

// planScale reads every object and says what scale would change, and
// returns the ETag of each object it judged: the scale writes only over
// those (nodeid.ScaleIfUnchanged), so nothing is changed on the strength
// of a judgement about an object that has changed since.
func planScale(ctx context.Context, repo nodeid.Repository, size int, localLease time.Duration) ([]scaleChange, map[int]string, error) {
	listing, err := repo.List(ctx)
	if err != nil {
		return nil, nil, err
	}
	cluster, err := clusterLease(ctx, repo)
	if err != nil {
		return nil, nil, err
	}
	checked := map[int]string{}
	var changes []scaleChange
	for id := 0; id < size; id++ {
		if _, ok := listing.Slot(id); !ok {
			changes = append(changes, scaleChange{id: id, what: "create (takeable one lease duration after its creation)"})
		}
	}
	for _, slot := range listing.Slots {
		rec, err := repo.Get(ctx, slot.ID)
		if errors.Is(err, nodeid.ErrCorruptLease) {
			continue // scale leaves a corrupt object alone
		}
		if err != nil {
			return nil, nil, err
		}
		checked[slot.ID] = rec.ETag
		want := slot.ID < size
		if rec.Lease.Acquirable == want {
			continue
		}
		if want {
			changes = append(changes, scaleChange{id: slot.ID, what: "make acquirable again"})
			continue
		}
		c := scaleChange{id: slot.ID, what: "mark unusable"}
		if live, ago := liveHolder(rec, localLease, cluster); live {
			c.fences = true
			c.what += fmt.Sprintf(": FENCES its live holder %s (v%d, last renewed %v ago), which exits 3", rec.Lease.TaskID, rec.Lease.Instance.Version, ago.Round(time.Second))
		} else if rec.Lease.Held() {
			c.what += fmt.Sprintf(" (its holder %s has expired)", rec.Lease.TaskID)
		}
		changes = append(changes, c)
	}
	return changes, checked, nil
}

// changedError is the error of an admin command whose write found the
// object changed since its check (a new holder, a renewal, another
// operator): nothing was written over it (exit 1).
func changedError(err error) error {
	if m := changedNode.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Errorf("node %s changed since it was checked; nothing was written over it; run again", m[1])
	}
	return fmt.Errorf("a lease object changed since it was checked; nothing was written over it; run again")
}

var changedNode = regexp.MustCompile(`node (\d+): `)

func cmdScale(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	s, repo, _, err := adminSession(ctx, "scale", args, stdout, stderr, changeFlags)
	if err != nil {
		return err
	}
	if err := explicitSize(s, "scale"); err != nil {
		return err
	}
	changes, checked, err := planScale(ctx, repo, s.clusterSize, s.leaseDuration)
	if err != nil {
		return err
	}
	fences, creates := 0, 0
	for _, c := range changes {
		if c.fences {
			fences++
		}
		if strings.HasPrefix(c.what, "create") {
			creates++
		}
	}
	prefix := ""
	if s.dryRun {
		prefix = "dry run: would "
	}
	if len(changes) == 0 {
		fmt.Fprintf(stdout, "%snothing to change: s3://%s/%s already has node IDs 0..%d acquirable and none above\n", strings.TrimSuffix(prefix, "would "), s.bucket, s.prefix, s.clusterSize-1)
		return nil
	}
	if s.dryRun {
		for _, c := range changes {
			fmt.Fprintf(stdout, "dry run: node %d: would %s\n", c.id, c.what)
		}
		return nil
	}
	if fences > 0 && !s.yes {
		var ids []int
		for _, c := range changes {
			if c.fences {
				ids = append(ids, c.id)
			}
		}
		return usagef("scale to %d would fence the live holders of node %s (renewed within the lease duration); stop them first (lower the desired count), or add --yes", s.clusterSize, idRanges(ids))
	}
	if creates > largeChange && !s.yes {
		return usagef("scale to %d would create %d lease objects: more than %d; add --yes if that is meant", s.clusterSize, creates, largeChange)
	}
	if err := nodeid.ScaleIfUnchanged(ctx, repo, s.clusterSize, s.taskID, s.leaseDuration, checked); err != nil {
		if errors.Is(err, nodeid.ErrChanged) {
			return changedError(err)
		}
		return err
	}
	for _, c := range changes {
		fmt.Fprintf(stdout, "node %d: %s\n", c.id, c.what)
	}
	fmt.Fprintf(stdout, "cluster scaled to %d node IDs (0..%d); IDs at and above %d are unusable\n", s.clusterSize, s.clusterSize-1, s.clusterSize)
	fmt.Fprintf(stdout, "next: set NODEID_CLUSTER_SIZE=%d (and the broker's own cluster size) in the task definition and roll it out: tasks only take IDs below their own NODEID_CLUSTER_SIZE\n", s.clusterSize)
	return nil
}
