package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nodeid/nodeid/datadir"
	"github.com/nodeid/nodeid/nodeid"
)

// largeChange is the number of lease objects above which bootstrap and
// scale want --yes: a mistyped size must not create a thousand objects.
const largeChange = 32

// adminSession reads the settings of an operator command and connects.
func adminSession(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer, extra func(*flag.FlagSet, *settings)) (*settings, *nodeid.S3Repository, *slog.Logger, error) {
	s, repo, log, err := connectSession(ctx, cmd, []string{"cluster-size", "lease-duration", "task-id"}, args, stdout, stderr, extra)
	if err == nil && s.taskID == "" {
		s.taskID = "nodeid-init-" + cmd
	}
	return s, repo, log, err
}

// readSession reads the settings of a read-only command (status, peers)
// and connects.
func readSession(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer, extra func(*flag.FlagSet, *settings)) (*settings, *nodeid.S3Repository, *slog.Logger, error) {
	return connectSession(ctx, cmd, []string{"cluster-size", "lease-duration"}, args, stdout, stderr, extra)
}

// connectSession parses the options names (and the S3 ones) of cmd, which
// takes no arguments, requires a bucket and connects.
func connectSession(ctx context.Context, cmd string, names, args []string, stdout, stderr io.Writer, extra func(*flag.FlagSet, *settings)) (*settings, *nodeid.S3Repository, *slog.Logger, error) {
	s, rest, err := parseSettings(ctx, cmd, args, stdout, append(names, s3Options...), extra)
	if err != nil {
		return nil, nil, nil, err
	}
	if len(rest) > 0 {
		return nil, nil, nil, usagef("unexpected arguments %q", rest)
	}
	if err := s.requireBucket(); err != nil {
		return nil, nil, nil, err
	}
	if s.leaseDuration == 0 {
		s.leaseDuration = nodeid.DefaultLeaseDuration
	}
	log := s.logger(stderr)
	repo, err := s.repository(ctx, log)
	return s, repo, log, err
}

// changeFlags are the flags of the commands that change the bucket.
func changeFlags(fs *flag.FlagSet, s *settings) {
	fs.BoolVar(&s.dryRun, "dry-run", false, "print what would change and change nothing")
	fs.BoolVar(&s.yes, "yes", false, "confirm a change that fences a live holder, or creates more than 32 objects")
}

// explicitSize is the cluster size of bootstrap and scale: only from the
// command line, so that a NODEID_CLUSTER_SIZE left in the shell never
// resizes a cluster.
func explicitSize(s *settings, cmd string) error {
	if !s.explicit["cluster-size"] {
		return usagef("%s needs --cluster-size N on the command line (NODEID_CLUSTER_SIZE is ignored here, so that a variable left in the shell never resizes a cluster)", cmd)
	}
	return nil
}

// liveHolder reports whether rec is held and not expired by S3's clock
// (the holder renewed within the lease duration), and when it last wrote.
func liveHolder(rec nodeid.Record, localLease time.Duration) (bool, time.Duration) {
	l := rec.Lease
	if !l.Held() || rec.ServerDate.IsZero() {
		return l.Held(), 0
	}
	lease := max(l.Duration, localLease, rec.ClaimedDuration())
	return !nodeid.ExpiredByServerClock(rec.LastModified, rec.ServerDate, lease), rec.ServerDate.Sub(rec.LastModified)
}

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
		if live, ago := liveHolder(rec, localLease); live {
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

// idRanges renders sorted IDs as 0-3,5.
func idRanges(ids []int) string {
	var parts []string
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", ids[i], ids[j]))
		} else {
			parts = append(parts, strconv.Itoa(ids[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

func cmdRelease(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var nodeArg string
	var atLeast int64
	s, repo, _, err := adminSession(ctx, "release", args, stdout, stderr, func(fs *flag.FlagSet, s *settings) {
		fs.StringVar(&nodeArg, "node", "", "node ID to release (required)")
		fs.BoolVar(&s.force, "force", false, "required: the holder must be known to be dead")
		fs.Int64Var(&atLeast, "version", 0, "release at this version at least; required when the object is missing or corrupt and no peer knows the version")
		fs.StringVar(&s.dataRoot, "data-root", "", "shared storage root; refuse a version below the newest valid node-N/vK there")
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
		newest, found, err := datadir.Newest(s.dataRoot, node, datadir.Cluster{Bucket: s.bucket, Prefix: s.prefix})
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
	missing := errors.Is(gerr, nodeid.ErrNotFound)
	if gerr != nil && !missing && !errors.Is(gerr, nodeid.ErrCorruptLease) {
		return gerr
	}
	unusable := gerr == nil && !rec.Lease.Acquirable
	if gerr == nil && !unusable { // an unusable lease's holder is fenced already
		if live, ago := liveHolder(rec, s.leaseDuration); live && !s.yes && !s.dryRun {
			return usagef("node %d is held by %s (v%d), renewed %v ago, within its lease duration: it looks alive. A live holder keeps writing until its next renewal fails; add --yes only if it is known to be dead",
				node, rec.Lease.TaskID, rec.Lease.Instance.Version, ago.Round(time.Second))
		}
	}
	if s.dryRun {
		state := "missing (it would be created)"
		switch {
		case gerr != nil && !missing:
			state = "corrupt"
		case gerr == nil && rec.Lease.Held():
			state = fmt.Sprintf("held by %s at v%d", rec.Lease.TaskID, rec.Lease.Instance.Version)
			if live, ago := liveHolder(rec, s.leaseDuration); live {
				state += fmt.Sprintf(", renewed %v ago: it would be FENCED (needs --yes)", ago.Round(time.Second))
			}
		case gerr == nil:
			state = fmt.Sprintf("released at v%d", rec.Lease.Instance.Version)
		}
		fmt.Fprintf(stdout, "dry run: would force-release node %d (%s) at version %d or the highest version a peer knows, if higher\n", node, state, max(atLeast, int64(rec.Lease.Instance.Version)))
		return nil
	}
	// The release writes only over the object the guard judged (its ETag;
	// "" = missing): a holder that took the ID since is never fenced.
	v, err := nodeid.ForceReleaseIfUnchanged(ctx, repo, node, nodeid.Version(atLeast), s.taskID, rec.ETag)
	if errors.Is(err, nodeid.ErrChanged) {
		return fmt.Errorf("node %d changed since it was checked; nothing was written over it; run again", node)
	}
	if errors.Is(err, nodeid.ErrVersionUnknown) {
		return usagef("%v: pass --version V (the newest node-%d/vV in the data root, or pass --data-root)", err, node)
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

func cmdProbe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	s, repo, log, err := adminSession(ctx, "probe", args, stdout, stderr, nil)
	if err != nil {
		return err
	}
	s.skipProbe = false
	if err := s.probe(ctx, repo, log); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "s3://%s: conditional writes are enforced (If-None-Match: * and If-Match)\n", s.bucket)
	return nil
}
