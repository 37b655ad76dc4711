package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/nodeid/nodeid/leasefile"
)

// cmdHealth exits 0 when the lease published in the lease file is valid on
// this host's monotonic clock, or when the task is a hot spare waiting for a
// node ID (unless --held); 1 otherwise: an ECS container health check. It
// finds the file as the broker does: --lease-file or NODEID_LEASE_FILE,
// else NODE_LEASE_FILE, else run's default.
func cmdHealth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var heldOnly bool
	s, rest, err := parseSettings(ctx, "health", args, stdout, []string{"lease-file"}, func(fs *flag.FlagSet, s *settings) {
		fs.BoolVar(&heldOnly, "held", false, "exit 1 while the task waits for a node ID (default: a waiting hot spare is healthy)")
	})
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("unexpected arguments %q", rest)
	}
	path := s.leaseFile
	if path == "" {
		path = strings.TrimSpace(os.Getenv("NODE_LEASE_FILE"))
	}
	if path == "" {
		path = defaultLeasePath()
	}
	l, err := leasefile.Read(path)
	if errors.Is(err, leasefile.ErrNoLease) {
		return fmt.Errorf("no lease file %s: is nodeid-init run (or acquire/renew with --lease-file) running in this container? Else set --lease-file or NODEID_LEASE_FILE", path)
	}
	if err != nil {
		return err
	}
	if l.State == leasefile.StateWaiting {
		if heldOnly {
			return fmt.Errorf("task %s is waiting for a node ID (--held)", l.TaskID)
		}
		fmt.Fprintf(stdout, "task %s is waiting for a node ID (hot spare)\n", l.TaskID)
		return nil
	}
	if !l.Valid() {
		return fmt.Errorf("lease of node %d v%d is %s and not valid (%s)", l.NodeID, l.Version, l.State, path)
	}
	fmt.Fprintf(stdout, "node %d v%d held by %s, valid for %v\n", l.NodeID, l.Version, l.TaskID, l.Remaining().Round(1e6))
	return nil
}

// version and commit are stamped by scripts/build.sh with
// -ldflags "-X main.version=... -X main.commit=...".
var version, commit = "dev", ""

// buildVersion returns the stamped version and commit; unstamped, those of
// the build info (go install module@version, VCS stamping), else "dev" and
// "unknown".
var buildVersion = sync.OnceValues(func() (string, string) {
	v, c := version, commit
	if bi, ok := debug.ReadBuildInfo(); ok {
		if (v == "" || v == "dev") && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		if c == "" {
			c = vcsRevision(bi)
		}
	}
	if v == "" {
		v = "dev"
	}
	if c == "" {
		c = "unknown"
	}
	return v, c
})

// vcsRevision is the build info's 12-char revision, "-dirty" if modified.
func vcsRevision(bi *debug.BuildInfo) string {
	rev, dirty := "", ""
	for _, kv := range bi.Settings {
		switch {
		case kv.Key == "vcs.revision":
			rev = kv.Value[:min(12, len(kv.Value))]
		case kv.Key == "vcs.modified" && kv.Value == "true":
			dirty = "-dirty"
		}
	}
	if rev == "" {
		return ""
	}
	return rev + dirty
}

// versionLine is what version and --version print.
func versionLine() string {
	v, c := buildVersion()
	return fmt.Sprintf("nodeid-init %s %s (%s %s/%s)", v, c, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func cmdVersion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fmt.Fprintln(stdout, versionLine())
	return nil
}

func filepathJoinDir(file, name string) string { return filepath.Join(filepath.Dir(file), name) }
