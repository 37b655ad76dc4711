package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/nodeid/nodeid/datadir"
	"github.com/nodeid/nodeid/nodeid"
)

func cmdRelease(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var nodeArg string
	var atLeast int64
	var camundaOK bool
	s, repo, _, err := adminSession(ctx, "release", args, stdout, stderr, func(fs *flag.FlagSet, s *settings) {
		fs.StringVar(&nodeArg, "node", "", "node ID to release (required)")
		fs.BoolVar(&s.force, "force", false, "required: the holder must be known to be dead")
		fs.Int64Var(&atLeast, "version", 0, "release at this version at least; required when the object is missing or corrupt and no peer knows the version")
		fs.StringVar(&s.dataRoot, "data-root", "", "shared storage root; refuse a version below the newest valid node-N/vK there")
		fs.BoolVar(&camundaOK, "camunda-graceful-ok", false, "release although the lease set holds leases in Camunda's format or Camunda's cluster marker: a Camunda broker that takes the ID reads the forced release as graceful and hard-links the last holder's files")
		changeFlags(fs, s)
	})
	if err != nil {
		return err
	}
	if nodeArg == "" {
		return usagef("no node: set --node N")
	}
	node, err := strconv.Atoi(nodeArg)
	if err != nil || node < 0 || node >= maxClusterSize {
		return usagef("invalid --node %q: a node ID is an integer 0..%d", nodeArg, maxClusterSize-1)
	}
	if !s.force {
		return usagef("release --node %d needs --force: a live holder keeps writing until its next renewal fails, and its successor would hard-link its files", node)
	}
	if atLeast < 0 {
		return usagef("invalid --version %d: must be >= 0", atLeast)
	}
	if s.dataRoot != "" {
		// The newest complete data directory must not be above the version
		// released: its successor would start from older data, or refuse.
		var newest nodeid.Version
		var found bool
		err := s.boundedCheck(fmt.Sprintf("scan of node-%d", node), func() (err error) {
			newest, found, err = datadir.Newest(s.dataRoot, node, datadir.Cluster{Bucket: s.bucket, Prefix: s.prefix})
			return err
		})
		var ce *codeError
		if errors.As(err, &ce) {
			return err
		}
		if err != nil {
			return usagef("data root %s: %v", s.dataRoot, err)
		}
		if found && nodeid.Version(atLeast) < newest {
			if atLeast > 0 {
				return usagef("--version %d is below node-%d/v%d in %s; use --version %d or higher", atLeast, node, newest, s.dataRoot, newest)
			}
			atLeast = int64(newest)
		}
	}
	rec, gerr := repo.Get(ctx, node)
	state := objectStateOf(rec, gerr)
	if gerr != nil && state == "" {
		return gerr
	}
	marker, markerFound, err := readClusterMarker(ctx, repo)
	if err != nil {
		return err
	}
	if err := releaseInCluster(s, node, state == "missing", marker); err != nil {
		return err
	}
	if state != "" && state != "unusable" && atLeast == 0 {
		return unknownVersion(node, state, s.dataRoot)
	}
	cluster := marker.LeaseDuration
	unusable := state == "unusable"
	if state == "" {
		if live, ago := liveHolder(rec, s.leaseDuration, cluster); live && !s.yes && !s.dryRun {
			return usagef("node %d is held by %s (v%d), renewed %v ago, within its lease duration: it looks alive. A live holder keeps writing until its next renewal fails; add --yes only if it is known to be dead",
				node, rec.Lease.TaskID, rec.Lease.Instance.Version, ago.Round(time.Second))
		}
	} else if !s.yes && !s.dryRun {
		if why := lastHolderMayBeValid(rec, state, s.leaseDuration, cluster); why != "" {
			return usagef("node %d %s: its last holder may still be valid; add --yes only if it is known to be dead", node, why)
		}
	}
	// A Camunda broker that waits for an ID writes nothing: its marker is
	// all that shows Camunda uses this lease set (docs/cli.md#release).
	camunda, err := camundaWritten(ctx, repo)
	if err != nil {
		return err
	}
	var camundaSeen string
	switch {
	case len(camunda) > 0:
		camundaSeen = fmt.Sprintf("leases in Camunda's format (node IDs %v)", camunda)
	case markerFound && camundaMarker(marker):
		camundaSeen = fmt.Sprintf("Camunda's cluster marker %s (Camunda bootstrapped it; a waiting Camunda broker leaves no object of its own)", nodeid.MarkerKey(s.prefix))
	}
	if camundaSeen != "" && !camundaOK && !s.dryRun {
		return usagef("the lease set holds %s: Camunda brokers may take node %d, and Camunda ignores forced=true, so it would read this release as graceful and hard-link the files of a holder that may still write; nothing was written. Add --camunda-graceful-ok only if no Camunda broker runs on this bucket, or its hard links are acceptable", camundaSeen, node)
	}
	if s.dryRun {
		what := "missing (it would be created)"
		switch {
		case gerr != nil && !errors.Is(gerr, nodeid.ErrNotFound):
			what = "corrupt"
		case gerr == nil && rec.Lease.Held():
			what = fmt.Sprintf("held by %s at v%d", rec.Lease.TaskID, rec.Lease.Instance.Version)
			if live, ago := liveHolder(rec, s.leaseDuration, cluster); live {
				what += fmt.Sprintf(", renewed %v ago: it would be FENCED (needs --yes)", ago.Round(time.Second))
			}
		case gerr == nil:
			what = fmt.Sprintf("released at v%d", rec.Lease.Instance.Version)
		}
		if state != "" {
			if why := lastHolderMayBeValid(rec, state, s.leaseDuration, cluster); why != "" {
				what += fmt.Sprintf("; needs --yes: it %s", why)
			}
		}
		if camundaSeen != "" && !camundaOK {
			what += "; needs --camunda-graceful-ok: " + camundaSeen
		}
		fmt.Fprintf(stdout, "dry run: would force-release node %d (%s) at version %d or the highest version a peer knows, if higher\n", node, what, max(atLeast, int64(rec.Lease.Instance.Version)))
		return nil
	}
	// The release writes only over the object the guard judged (its ETag;
	// "" = missing): a holder that took the ID since is never fenced.
	v, err := nodeid.ForceReleaseIfUnchanged(ctx, repo, node, nodeid.Version(atLeast), s.taskID, rec.ETag)
	if errors.Is(err, nodeid.ErrChanged) {
		return fmt.Errorf("node %d changed since it was checked; nothing was written over it; run again", node)
	}
	if errors.Is(err, nodeid.ErrVersionUnknown) {
		return unknownVersion(node, cmp.Or(state, "corrupt"), s.dataRoot)
	}
	if err != nil {
		return err
	}
	if unusable {
		fmt.Fprintf(stdout, "node %d released at version %d; it is unusable (at or above the cluster size after a scale-down): nobody takes it until `nodeid-init scale` makes it acquirable again\n", node, v)
		return nil
	}
	fmt.Fprintf(stdout, "node %d released at version %d; the next holder gets version %d\n", node, v, v+1)
	return nil
}

// releaseInCluster refuses to create the object of a node ID outside the
// cluster: `--node 12` on a cluster of 2 made 12.json, a node ID no task
// takes that status --check counts as unheld from then on. The cluster is
// the IDs below --cluster-size when it is given on the command line (the
// operator's word), else below the size the cluster marker records, plus
// every ID whose object exists (created by scale, or marked unusable by a
// scale-down): releasing those creates nothing.
func releaseInCluster(s *settings, node int, missing bool, marker nodeid.ClusterMarker) error {
	if !missing {
		return nil
	}
	key := nodeid.LeaseKey(s.prefix, node)
	switch {
	case s.explicit["cluster-size"]:
		if node < s.clusterSize {
			return nil
		}
		return usagef("node %d is outside the cluster: --cluster-size %d has node IDs 0..%d and s3://%s/%s does not exist; nothing was written", node, s.clusterSize, s.clusterSize-1, s.bucket, key)
	case marker.ClusterSize > 0:
		if node < marker.ClusterSize {
			return nil
		}
		return usagef("node %d is outside the cluster: its marker records %d node IDs (0..%d) and s3://%s/%s does not exist, so a release would create a node ID no task takes; nothing was written. Check --node, or pass --cluster-size N (N > %d) on the command line if the cluster has more IDs", node, marker.ClusterSize, marker.ClusterSize-1, s.bucket, key, node)
	default:
		return usagef("node %d: s3://%s/%s does not exist and the cluster marker records no cluster size (none, or Camunda's), so nothing tells whether node %d belongs to the cluster; nothing was written. Pass --cluster-size N (N > %d) on the command line if it does", node, s.bucket, key, node, node)
	}
}

// objectStateOf names what an object is when its lease names no holder the
// guards can judge, or "" for a lease that does (held or released by a
// holder at a version):
//   - "missing", "corrupt": nothing to read;
//   - "unusable": scaled down, perhaps while held;
//   - "without a version": it records version 0 (an empty body without
//     Camunda's metadata, or an object never held): like a missing one it
//     says neither the last holder's version nor, if the body was written
//     over a holder, whether that holder is still valid.
func objectStateOf(rec nodeid.Record, err error) string {
	switch {
	case errors.Is(err, nodeid.ErrNotFound):
		return "missing"
	case errors.Is(err, nodeid.ErrCorruptLease):
		return "corrupt"
	case err != nil:
		return ""
	case !rec.Lease.Acquirable:
		return "unusable"
	case rec.Lease.Instance.Version == 0:
		return "without a version"
	}
	return ""
}

// unknownVersion is the error of a release of an object that records no
// version (missing, corrupt, or at version 0) with no version given: what the
// peers know may be older than the last holder's version, so the operator
// must say (exit 2).
func unknownVersion(node int, state, dataRoot string) error {
	what := state
	if state == "without a version" {
		what = "at version 0 (an empty body, or never held)"
	}
	if dataRoot != "" {
		return usagef("node %d: the object is %s and %s has no valid node-%d/vK, so its version is unknown (peers may know only an older one); pass --version V, the last holder's version", node, what, dataRoot, node)
	}
	return usagef("node %d: the object is %s, so its version is unknown (peers may know only an older one); pass --version V or --data-root DIR (the newest valid node-%d/vK there)", node, what, node)
}

// lastHolderMayBeValid judges an object whose holder, if any, the lease
// cannot name (corrupt, missing, or unusable: scaled down while perhaps
// held) by S3's clock alone: the holder's last renewal was sent before
// this object's write landed, so it is over only once Date - Last-Modified
// >= the longest lease duration known + 1 s (nodeid.HolderDuration). A
// missing object has no time to judge. It returns why the holder may be
// valid, or "".
func lastHolderMayBeValid(rec nodeid.Record, state string, own, cluster time.Duration) string {
	if state == "missing" {
		return "has no lease object, so when it was last written is unknown (a live holder writes its version back)"
	}
	what := "is " + state
	switch state {
	case "unusable":
		what = "is unusable (scaled down)"
	case "without a version":
		what = "records no version (an empty body, or never held)"
	}
	if rec.ServerDate.IsZero() || rec.LastModified.IsZero() {
		return what + " and S3 gave no Date or Last-Modified to judge it by"
	}
	lease := nodeid.HolderDuration(rec, own, cluster)
	if nodeid.ExpiredByServerClock(rec.LastModified, rec.ServerDate, lease) {
		return ""
	}
	return fmt.Sprintf("%s, written %v ago by S3's clock, within the longest lease duration known (%v) + 1s", what, rec.ServerDate.Sub(rec.LastModified).Round(time.Second), lease)
}

// camundaWritten returns the node IDs whose lease objects are in Camunda's
// format: an empty body (Camunda's bootstrap or release) or a held lease
// without nodeid's nonce and duration. While there are any, Camunda
// brokers may share the lease set, and a Camunda broker takes a forced
// release as graceful (it ignores forced=true) and hard-links everything.
// One LIST and a GET per object: an admin command's cost.
func camundaWritten(ctx context.Context, repo *nodeid.S3Repository) ([]int, error) {
	listing, err := repo.List(ctx)
	if err != nil {
		return nil, err
	}
	var ids []int
	for _, slot := range listing.Slots {
		rec, err := repo.Get(ctx, slot.ID)
		switch {
		case errors.Is(err, nodeid.ErrNotFound), errors.Is(err, nodeid.ErrCorruptLease):
			continue // nothing Camunda could read as a lease
		case err != nil:
			return nil, err
		case rec.Lease.Legacy || rec.Lease.Foreign():
			ids = append(ids, slot.ID)
		}
	}
	return ids, nil
}
