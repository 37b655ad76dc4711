package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

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
// (the holder renewed within the lease duration nodeid.HolderDuration gives,
// with cluster the marker's), and when it last wrote.
func liveHolder(rec nodeid.Record, localLease, cluster time.Duration) (bool, time.Duration) {
	l := rec.Lease
	if !l.Held() || rec.ServerDate.IsZero() {
		return l.Held(), 0
	}
	lease := nodeid.HolderDuration(rec, localLease, cluster)
	return !nodeid.ExpiredByServerClock(rec.LastModified, rec.ServerDate, lease), rec.ServerDate.Sub(rec.LastModified)
}

// clusterLease reads the cluster's lease duration from its marker (0 if
// there is none yet), for the guards that judge holders.
func clusterLease(ctx context.Context, repo nodeid.Repository) (time.Duration, error) {
	m, err := clusterMarker(ctx, repo)
	return m.LeaseDuration, err
}

// clusterMarker reads the cluster marker: the zero marker if there is none.
func clusterMarker(ctx context.Context, repo nodeid.Repository) (nodeid.ClusterMarker, error) {
	m, _, err := readClusterMarker(ctx, repo)
	return m, err
}

// readClusterMarker is clusterMarker that also says whether the marker
// exists, so that a missing one is told from Camunda's (camundaMarker).
func readClusterMarker(ctx context.Context, repo nodeid.Repository) (m nodeid.ClusterMarker, found bool, err error) {
	m, err = repo.Marker(ctx)
	if errors.Is(err, nodeid.ErrNotFound) {
		return nodeid.ClusterMarker{}, false, nil
	}
	if err != nil {
		return nodeid.ClusterMarker{}, false, fmt.Errorf("reading the cluster marker: %w", err)
	}
	return m, true, nil
}

// camundaMarker reports whether an existing marker m is in Camunda's form
// (an empty body): Camunda bootstrapped the lease set, so Camunda brokers
// may use it, even when none holds an ID now. nodeid's markers always
// record the bootstrap and the cluster size.
func camundaMarker(m nodeid.ClusterMarker) bool {
	return len(m.Bootstrap) == 0 && m.CreatedBy == "" && m.ClusterSize == 0 && m.LeaseDuration == 0
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
