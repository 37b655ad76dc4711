package datadir

import (
	"fmt"
	"path"
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

	// LinkAfterCrash lists slash-separated paths relative to the version
	// directory (for example "snapshots"): regular files below them are
	// never modified once written, and are hard-linked even after an
	// ungraceful takeover, unless the file has another name (see
	// Options.Immutable).
	LinkAfterCrash []string
}

// Preset returns the copy rules named name: PresetDefault (or "") adds
// nothing, which is this package's behaviour without presets; PresetZeebe
// follows Camunda 8.9's own copier, so that a node moved between Camunda's
// provider and this one carries over the same files:
//
//   - every path segment named "runtime" is left out: Zeebe rebuilds its
//     runtime state (RocksDB) from the newest snapshot at start;
//   - after an ungraceful takeover, files below the top-level "snapshots"
//     and "bootstrap-snapshots" are hard-linked, since Zeebe never modifies
//     a snapshot once it is written; the rest is copied.
//
// After a graceful release everything carried over is hard-linked anyway.
func Preset(name string) (CopyRules, error) {
	switch name {
	case "", PresetDefault:
		return CopyRules{}, nil
	case PresetZeebe:
		return CopyRules{
			SkipSegment:    []string{"runtime"},
			LinkAfterCrash: []string{"snapshots", "bootstrap-snapshots"},
		}, nil
	}
	return CopyRules{}, fmt.Errorf("%w: unknown preset %q (want %s or %s)", ErrInvalid, name, PresetDefault, PresetZeebe)
}

// check rejects names and paths that could never match a clean relative
// path, or would match everything.
func (r CopyRules) check() error {
	for _, s := range r.SkipSegment {
		if s == "" || s == "." || s == ".." || strings.Contains(s, "/") {
			return fmt.Errorf("SkipSegment %q is not a file name", s)
		}
	}
	for _, p := range r.LinkAfterCrash {
		if p == "" || p == "." || path.Clean(p) != p || path.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") {
			return fmt.Errorf("LinkAfterCrash %q is not a clean relative path", p)
		}
	}
	return nil
}

// skips reports whether a segment of the slash-separated path rel is one of
// SkipSegment.
func (r CopyRules) skips(rel string) bool {
	for seg := range strings.SplitSeq(rel, "/") {
		for _, s := range r.SkipSegment {
			if seg == s {
				return true
			}
		}
	}
	return false
}

// linksAfterCrash reports whether rel lies below one of LinkAfterCrash.
func (r CopyRules) linksAfterCrash(rel string) bool {
	for _, p := range r.LinkAfterCrash {
		if strings.HasPrefix(rel, p+"/") {
			return true
		}
	}
	return false
}
