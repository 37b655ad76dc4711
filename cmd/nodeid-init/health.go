package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"runtime/debug"

	"github.com/nodeid/nodeid/leasefile"
)

// cmdHealth exits 0 when the lease published in the lease file is valid on
// this host's monotonic clock, 1 otherwise: an ECS container health check.
func cmdHealth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	s, rest, err := parseSettings("health", args, stderr, []string{"lease-file"}, nil)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("unexpected arguments %q", rest)
	}
	if s.leaseFile == "" {
		return usagef("no lease file: set --lease-file or NODEID_LEASE_FILE")
	}
	l, err := leasefile.Check(s.leaseFile)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "node %d v%d held by %s, valid for %v\n", l.NodeID, l.Version, l.TaskID, l.Remaining().Round(1e6))
	return nil
}

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func cmdVersion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	rev := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, kv := range bi.Settings {
			if kv.Key == "vcs.revision" && len(kv.Value) >= 12 {
				rev = " " + kv.Value[:12]
			}
		}
	}
	fmt.Fprintf(stdout, "nodeid-init %s%s (%s)\n", version, rev, runtime.Version())
	return nil
}

func filepathJoinDir(file, name string) string { return filepath.Join(filepath.Dir(file), name) }
