package datadir

import (
	"fmt"
	"slices"
	"strings"
)

// Names of the copy-rule presets accepted by Preset.
const (
	PresetDefault = "default"
	PresetZeebe   = "zeebe"
)

// CopyRules are the copy rules of an application's data layout. They add to
// Options.Skip and Options.Immutable; the zero value adds nothing.
type CopyRules struct {
	// SkipSegment lists entry names that are never carried over, at any
	// depth: an entry is left out, a directory with everything below it, if
	// any segment of its path is one of them.
	SkipSegment []string

	// LinkAfterCrashSegment lists entry names, at any depth (for example
	// "snapshots"): a regular file any segment of whose path is one of them
	// is never modified once written, and is hard-linked even after an
	// ungraceful takeover, unless the file has another name (see
	// Options.Immutable) or changed recently (see Options.SettleTime).
	LinkAfterCrashSegment []string
}

// Preset returns the copy rules named name: PresetDefault (or "") adds
// nothing, which is this package's behaviour without presets; PresetZeebe
// follows Camunda 8.9's own copier, so that a node moved between Camunda's
// provider and this one carries over the same files:
//
//   - every path segment named "runtime" is left out: Zeebe rebuilds its
//     runtime state (RocksDB) from the newest snapshot at start;
//   - after an ungraceful takeover, files with a path segment named
//     "snapshots" or "bootstrap-snapshots" at any depth (Zeebe keeps them in
//     raft-partition/partitions/<p>/snapshots) are hard-linked, since Zeebe
//     never modifies a snapshot once it is written; the rest is copied.
//
// After a graceful release everything carried over is hard-linked anyway.
func Preset(name string) (CopyRules, error) {
	switch name {
	case "", PresetDefault:
		return CopyRules{}, nil
	case PresetZeebe:
		return CopyRules{
			SkipSegment:           []string{"runtime"},
			LinkAfterCrashSegment: []string{"snapshots", "bootstrap-snapshots"},
		}, nil
	}
	return CopyRules{}, fmt.Errorf("%w: unknown preset %q (want %s or %s)", ErrInvalid, name, PresetDefault, PresetZeebe)
}

// check rejects names and paths that could never match a clean relative
// path, or would match everything.
func (r CopyRules) check() error {
	for _, s := range r.SkipSegment {
		if !isFileName(s) {
			return fmt.Errorf("SkipSegment %q is not a file name", s)
		}
	}
	for _, s := range r.LinkAfterCrashSegment {
		if !isFileName(s) {
			return fmt.Errorf("LinkAfterCrashSegment %q is not a file name", s)
		}
	}
	return nil
}

func isFileName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.Contains(s, "/")
}

// skips reports whether a segment of the slash-separated path rel is one of
// SkipSegment.
func (r CopyRules) skips(rel string) bool { return hasSegment(rel, r.SkipSegment) }

// linksAfterCrash reports whether a segment of rel is one of
// LinkAfterCrashSegment, as Camunda's copier decides what is a snapshot file.
func (r CopyRules) linksAfterCrash(rel string) bool { return hasSegment(rel, r.LinkAfterCrashSegment) }

func hasSegment(rel string, names []string) bool {
	for seg := range strings.SplitSeq(rel, "/") {
		if slices.Contains(names, seg) {
			return true
		}
	}
	return false
}
