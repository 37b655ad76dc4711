package datadir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/nodeid/nodeid/node"
)

// dirState is what inspect found under a version directory's name. GC
// removes only stateValid (beyond Keep), stateLeftover, stateEmpty and
// stateNoData; the others cannot be identified and are left in place.
type dirState int

const (
	stateMissing   dirState = iota
	stateValid              // a directory with a valid marker
	stateLeftover           // ours, unfinished: no valid marker, our in-progress file (naming tenure)
	stateEmpty              // an empty directory: removing it loses nothing
	stateNoData             // only an in-progress file, empty or ours: a crash while writing it
	stateBadMarker          // a marker that cannot be read, not ours: perhaps valid in another format
	stateNotDir             // a symlink, file or anything else that is not a directory
	stateNotOurs            // a directory without a valid marker or an in-progress file of ours
)

// entry is a version directory as inspect judged it. dir is the directory
// itself, held open from the judgement to whatever is done with it, so
// that swapping the name for something else meanwhile changes nothing.
type entry struct {
	name   string
	v      node.Version
	st     dirState
	why    string      // what is wrong with a directory that is not valid
	tenure string      // stateLeftover: the tenure its in-progress file names
	dir    *os.File    // nil unless st is stateValid, stateLeftover, stateEmpty, stateNoData
	lone   unix.Stat_t // stateNoData: the in-progress file as judged
	// removing: a stateLeftover whose removal started (its in-progress
	// file renamed to claimName, or by an earlier release its marker to
	// removingName), not a preparation's.
	removing bool
}

func (e *entry) close() {
	if e.dir != nil {
		e.dir.Close()
		e.dir = nil
	}
}

// inspect classifies the entry name of the node directory as the directory
// of version v. An error means the state could not be established (for
// example an I/O error reading the marker); callers then must not remove
// anything. The caller closes the entry. It counts two steps in steps
// (Options.Progress): judging thousands of directories GC leaves in place
// (not ours) must not look like a hung file system.
func inspect(node *os.File, name string, v node.Version, c Cluster, steps *atomic.Int64) (e entry, err error) {
	e = entry{name: name, v: v}
	step(steps)
	d, err := openDirAt(node, name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		e.st = stateMissing
		return e, nil
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		// A symlink or file named like a version was not made by Prepare.
		e.st, e.why = stateNotDir, "not a directory"
		return e, nil
	case err != nil:
		return e, fmt.Errorf("datadir: %w", err)
	}
	keep := false
	defer func() {
		if !keep {
			d.Close()
		}
	}()
	_, merr := readMarker(d, v)
	if merr == nil {
		e.st, e.dir, keep = stateValid, d, true
		return e, nil
	}
	if !errors.Is(merr, errNoMarker) && !errors.Is(merr, errBadMarker) {
		return e, merr
	}
	switch ours, tenure, err := ownLeftover(d, v, c); {
	case err != nil:
		return e, err
	case ours:
		e.st, e.why, e.dir, e.tenure, keep = stateLeftover, merr.Error(), d, tenure, true
		return e, nil
	}
	// A removal claimed it (and stopped before its rename out of the
	// versions): being removed, never redone (no tenure).
	switch claimed, _, err := ownLeftoverAt(d, claimName, v, c); {
	case err != nil:
		return e, err
	case claimed:
		e.st, e.why, e.dir, e.removing, keep = stateLeftover, "being removed (its removal was claimed)", d, true, true
		return e, nil
	}
	// Left by an earlier release's removal of a valid version.
	switch _, err := readMarkerAt(d, removingName, v); {
	case err == nil:
		e.st, e.why, e.dir, e.removing, keep = stateLeftover, "being removed by garbage collection", d, true, true
		return e, nil
	case !errors.Is(err, errNoMarker) && !errors.Is(err, errBadMarker):
		return e, err
	}
	step(steps) // the lookups of our file names done; the listings follow
	switch empty, err := isEmpty(d); {
	case err != nil:
		return e, err
	case empty:
		e.st, e.why, e.dir, keep = stateEmpty, "empty", d, true
		return e, nil
	}
	switch lone, ok, err := onlyInProgress(d, c); {
	case err != nil:
		return e, err
	case ok:
		e.st, e.why, e.dir, e.lone, keep = stateNoData, "only an in-progress file", d, lone, true
		return e, nil
	}
	if errors.Is(merr, errBadMarker) {
		e.st, e.why = stateBadMarker, merr.Error()
		return e, nil
	}
	e.st, e.why = stateNotOurs, "no marker and no in-progress file of this cluster"
	return e, nil
}
