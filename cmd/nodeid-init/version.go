package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"sync"
)

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
