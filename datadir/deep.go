//go:build unix

package datadir

import (
	"fmt"
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// heldLevels is how many levels of a tree walk (the copy, validation,
// recheck, removal) keep their directories open while below them is
// walked. Deeper directories are closed when not in use and opened again
// by name from the deepest held ancestor, each level checked to be the
// directory first opened there: the descriptors held are bounded by a
// constant, whatever the depth, and a tree of normal depth is walked as
// before.
const heldLevels = 16

func idOf(d *os.File) (dirID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(d.Fd()), &st); err != nil {
		return dirID{}, &os.PathError{Op: "fstat", Path: d.Name(), Err: err}
	}
	return dirID{uint64(st.Dev), uint64(st.Ino)}, nil
}

// subJob makes the job of the directory name of parent, open as src and
// dst (either may be nil), held by the calling task: it calls release
// when done with them.
func subJob(parent *dirJob, name, rel string, src, dst *os.File, srcFlags, dstFlags int) (*dirJob, error) {
	j := &dirJob{parent: parent, src: src, dst: dst, name: name, rel: rel,
		srcFlags: srcFlags, dstFlags: dstFlags, depth: parent.depth + 1}
	if j.depth < heldLevels {
		return j, nil
	}
	j.deep, j.refs = true, 1
	var err error
	if src != nil {
		j.srcID, err = idOf(src)
	}
	if err == nil && dst != nil {
		j.dstID, err = idOf(dst)
	}
	return j, err
}

// acquire makes j's descriptors usable by the calling task until it calls
// release: a deep job's are opened again if no task holds them.
func (j *dirJob) acquire() error {
	if !j.deep {
		return nil
	}
	j.refsMu.Lock()
	defer j.refsMu.Unlock()
	if j.refs == 0 {
		if err := j.reopen(); err != nil {
			return err
		}
	}
	j.refs++
	return nil
}

// release ends a use of j's descriptors; a deep job's are closed after
// the last.
func (j *dirJob) release() {
	if !j.deep {
		return
	}
	j.refsMu.Lock()
	defer j.refsMu.Unlock()
	if j.refs--; j.refs == 0 {
		j.closeFiles()
	}
}

// closeHeld closes the descriptors of a job that is not deep, once done.
func (j *dirJob) closeHeld() {
	if !j.deep {
		j.closeFiles()
	}
}

func (j *dirJob) closeFiles() {
	if j.src != nil {
		j.src.Close()
		j.src = nil
	}
	if j.dst != nil {
		j.dst.Close()
		j.dst = nil
	}
}

// reopen opens j's directories again, by name from its nearest ancestor
// that is not deep (open while anything below it is walked), one level at
// a time without following a symlink, and checks that each level is the
// directory first opened there: one swapped, replaced by a symlink or
// moved meanwhile is ErrValidation, never a place to walk into.
func (j *dirJob) reopen() error {
	var chain []*dirJob
	a := j
	for ; a.deep; a = a.parent {
		chain = append(chain, a)
	}
	slices.Reverse(chain)
	if a.src != nil {
		src, err := reopenChain(a.src, chain, true)
		if err != nil {
			return err
		}
		j.src = src
	}
	if a.dst != nil {
		dst, err := reopenChain(a.dst, chain, false)
		if err != nil {
			j.closeFiles()
			return err
		}
		j.dst = dst
	}
	return nil
}

// reopenChain opens the source (src) or target directories of chain
// below from, in turn, holding at most two at a time.
func reopenChain(from *os.File, chain []*dirJob, src bool) (*os.File, error) {
	cur := from
	for _, c := range chain {
		flags, want := c.dstFlags, c.dstID
		if src {
			flags, want = c.srcFlags, c.srcID
		}
		next, err := openDirAtFlags(cur, c.name, flags)
		if cur != from {
			cur.Close()
		}
		if err != nil {
			return nil, err
		}
		if id, err := idOf(next); err != nil || id != want {
			next.Close()
			if err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %s: replaced or moved since it was first opened", ErrValidation, next.Name())
		}
		cur = next
	}
	return cur, nil
}
