package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/nodeid/nodeid/datadir"
	"github.com/nodeid/nodeid/nodeid"
)

// adminSession reads the settings of an operator command and connects.
func adminSession(ctx context.Context, cmd string, args []string, stderr io.Writer, extra func(*flag.FlagSet, *settings)) (*settings, *nodeid.S3Repository, error) {
	s, repo, err := connectSession(ctx, cmd, []string{"cluster-size", "lease-duration", "task-id"}, args, stderr, extra)
	if err == nil && s.taskID == "" {
		s.taskID = "nodeid-init-" + cmd
	}
	return s, repo, err
}

// readSession reads the settings of a read-only command (status, peers)
// and connects.
func readSession(ctx context.Context, cmd string, args []string, stderr io.Writer, extra func(*flag.FlagSet, *settings)) (*settings, *nodeid.S3Repository, error) {
	return connectSession(ctx, cmd, []string{"cluster-size", "lease-duration"}, args, stderr, extra)
}

// connectSession parses the options names (and the S3 ones) of cmd, which
// takes no arguments, requires a bucket and connects.
func connectSession(ctx context.Context, cmd string, names, args []string, stderr io.Writer, extra func(*flag.FlagSet, *settings)) (*settings, *nodeid.S3Repository, error) {
	s, rest, err := parseSettings(cmd, args, stderr, append(names, s3Options...), extra)
	if err != nil {
		return nil, nil, err
	}
	if len(rest) > 0 {
		return nil, nil, usagef("unexpected arguments %q", rest)
	}
	if err := s.requireBucket(); err != nil {
		return nil, nil, err
	}
	if s.leaseDuration == 0 {
		s.leaseDuration = nodeid.DefaultLeaseDuration
	}
	repo, err := s.repository(ctx)
	return s, repo, err
}

func cmdBootstrap(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	s, repo, err := adminSession(ctx, "bootstrap", args, stderr, nil)
	if err != nil {
		return err
	}
	if err := s.requireClusterSize(); err != nil {
		return err
	}
	if err := s.probe(ctx, repo, s.logger(stderr)); err != nil {
		return err
	}
	if err := nodeid.Initialize(ctx, repo, s.clusterSize, s.taskID, s.leaseDuration); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "cluster of %d node IDs ready in s3://%s/%s\n", s.clusterSize, s.bucket, s.prefix)
	return nil
}

func cmdScale(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	s, repo, err := adminSession(ctx, "scale", args, stderr, nil)
	if err != nil {
		return err
	}
	if err := s.requireClusterSize(); err != nil {
		return err
	}
	if err := nodeid.Scale(ctx, repo, s.clusterSize, s.taskID, s.leaseDuration); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "cluster scaled to %d node IDs (0..%d); any IDs at and above %d are now unusable and their holders fence themselves\n", s.clusterSize, s.clusterSize-1, s.clusterSize)
	return nil
}

func cmdRelease(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	node := -1
	var atLeast int64
	s, repo, err := adminSession(ctx, "release", args, stderr, func(fs *flag.FlagSet, s *settings) {
		fs.IntVar(&node, "node", -1, "node ID to release")
		fs.BoolVar(&s.force, "force", false, "required: the holder must be known to be dead")
		fs.Int64Var(&atLeast, "version", 0, "release at this version at least; required when the object is missing or corrupt and no peer knows the version")
		fs.StringVar(&s.dataRoot, "data-root", "", "shared storage root; refuse a version below the newest valid node-N/vK there")
	})
	if err != nil {
		return err
	}
	if node < 0 {
		return usagef("no node: set --node N")
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
	v, err := nodeid.ForceRelease(ctx, repo, node, nodeid.Version(atLeast), s.taskID)
	if errors.Is(err, nodeid.ErrVersionUnknown) {
		return usagef("%v: pass --version V (the newest node-%d/vV in the data root, or pass --data-root)", err, node)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "node %d released at version %d; the next holder gets version %d\n", node, v, v+1)
	return nil
}

func cmdProbe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	s, repo, err := adminSession(ctx, "probe", args, stderr, nil)
	if err != nil {
		return err
	}
	s.skipProbe = false
	if err := s.probe(ctx, repo, s.logger(stderr)); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "s3://%s: conditional writes are enforced (If-None-Match: * and If-Match)\n", s.bucket)
	return nil
}
