//go:build unix

package datadir

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// validate walks the source and the target again. Every entry of the
// source that should have been carried over must be in the target, and
// every entry of the target must be one this preparation made (see made)
// and still be as it made it: directories, symlinks with the source's
// target, hard links to the source's inode unchanged since linked, copies
// with the source's size (and content, if configured), of a source inode
// unchanged since it was copied (its size, mtime and ctime). A target entry
// whose source name is gone (deleted or renamed by a stale holder
// meanwhile) cannot be proven current and fails validation too. A source
// changed by a stale holder after it was copied fails validation; the
// target then gets no marker.
//
// It works on directory descriptors (fstatat, openat without following
// symlinks), a few system calls per file and one more listing per
// directory, because with hard links validation costs as much as the
// linking itself.
func (t *tree) validate() error {
	t.carried = map[string]carriedEntry{}
	t.err = nil
	t.pool = newPool()
	top := &dirJob{src: t.srcDir, dst: t.dstDir}
	top.start()
	t.pool.run(t.cfg.workers, func() { t.validateList(top) })
	return t.firstErr()
}

// validateList lists j's source and target again, checks that the target
// holds nothing the source does not, and queues the source's entries in
// batches.
func (t *tree) validateList(j *dirJob) {
	defer j.done()
	defer j.release() // the hold of the task that opened j
	if t.stopped() {
		return
	}
	entries, err := readDirEntriesFlags(j.src, j.srcFlags)
	if err != nil {
		t.setErr(err)
		return
	}
	names, err := readDirNamesFlags(j.dst, j.dstFlags)
	if err != nil {
		t.setErr(err)
		return
	}
	step(t.cfg.steps)
	inSource := make(map[string]bool, len(entries))
	for _, e := range entries {
		inSource[e.Name()] = true
	}
	slices.Sort(names)
	for _, name := range names {
		if j.rel == "" && name == PreparingName {
			continue
		}
		// The target holds exactly what this preparation made: a name the
		// source has but the copy left out (skipped, special) is planted.
		rel := path.Join(j.rel, name)
		_, made := t.madeAs(rel)
		switch {
		case made && inSource[name]:
			continue
		case made:
			t.setErr(fmt.Errorf("%w: %s: in the target, but gone from the source since it was carried over (deleted or renamed meanwhile): cannot be proven current", ErrValidation, rel))
		default:
			t.setErr(fmt.Errorf("%w: %s: in the target, but not made by this preparation", ErrValidation, rel))
		}
		return
	}
	var batches []func()
	for b := range slices.Chunk(entries, batch) {
		batches = append(batches, func() {
			if err := j.acquire(); err != nil {
				t.setErr(err)
				return
			}
			defer j.release()
			for _, e := range b {
				if t.stopped() {
					return
				}
				t.setErr(t.validateEntry(j, e))
				step(t.cfg.steps)
			}
		})
	}
	j.spread(t.pool, batches, perDir)
}

// validateEntry checks one entry of j's source against the target entry
// of that name and what this preparation made there.
func (t *tree) validateEntry(j *dirJob, e dirEntry) error {
	sfd, dfd := int(j.src.Fd()), int(j.dst.Fd())
	src, dst := j.src, j.dst
	name := e.Name()
	rel := path.Join(j.rel, name)
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrValidation, rel, fmt.Sprintf(format, args...))
	}
	// What was made decides what to check, not the source as it is now:
	// a link whose source name was replaced since is still a link.
	m, ok := t.madeAs(rel)
	switch act := t.classify(rel, e.Type(), true); {
	case (act == actSkip || act == actSpecial) && ok:
		return bad("carried over, but the source entry is now left out (type %v)", e.Type())
	case act == actSkip || act == actSpecial:
		return nil
	case !ok:
		return bad("missing in the target")
	}
	var ss, ds unix.Stat_t
	if err := t.statSource(sfd, name, e, &ss); err != nil {
		return err
	}
	switch err := fstatat(dfd, name, &ds); {
	case errors.Is(err, fs.ErrNotExist):
		return bad("missing in the target")
	case err != nil:
		return err
	}
	if st, dt := ss.Mode&unix.S_IFMT, ds.Mode&unix.S_IFMT; st != dt || dt != m.typ {
		return bad("file type %#o in the target, %#o in the source, %#o made", dt, st, m.typ)
	}
	if ds.Dev != m.dev || ds.Ino != m.ino {
		return bad("not the entry this preparation made (inode %d, made %d)", ds.Ino, m.ino)
	}
	ce := carriedEntry{typ: ds.Mode & unix.S_IFMT}
	if ce.typ == unix.S_IFREG {
		ce.size = ds.Size
	}
	t.carriedMu.Lock()
	t.carried[rel] = ce
	t.carriedMu.Unlock()
	sameInode := ss.Dev == ds.Dev && ss.Ino == ds.Ino
	switch m.act {
	case actDir:
		j.start()
		t.pool.add(func() { t.validateSubdir(j, name, rel, ss.Uid, ds.Uid) })
	case actSymlink:
		st, err := readlinkat(sfd, name)
		if err != nil {
			return err
		}
		dt, err := readlinkat(dfd, name)
		if err != nil {
			return err
		}
		if st != dt {
			return bad("link target %q in the target, %q in the source", dt, st)
		}
		if err := checkSymlink(t.dstRoot, rel, dt); err != nil {
			return err
		}
	case actLink:
		if !sameInode {
			return bad("not a hard link to the source (replaced in the source since it was linked?)")
		}
		t.bytesLinked.Add(ss.Size)
		if t.cfg.graceful {
			break
		}
		// Linked with one name in the source, plus ours: another name
		// appeared since, through which a stale holder may write.
		if ss.Nlink > 2 {
			return bad("linked, but the source file has %d names now", ss.Nlink)
		}
		// Settled when linked; written since (our link moved its ctime,
		// not its mtime): a stale holder still writes it.
		if !t.cfg.settledBefore.IsZero() && ss.Mtim.Nano() >= t.cfg.settledBefore.UnixNano() {
			return bad("linked, but the source file was written since")
		}
		// Written (or touched) since our linkat, even with its mtime
		// set back: that moves the ctime.
		if was := m.stamp; stampOf(&ds) != was {
			return bad("linked, but the file changed since it was linked (size %d→%d, mtime %v→%v, ctime %v→%v)",
				was.size, ds.Size, time.Unix(was.mtime.Unix()), time.Unix(ds.Mtim.Unix()),
				time.Unix(was.ctime.Unix()), time.Unix(ds.Ctim.Unix()))
		}
	case actCopy:
		if sameInode {
			// Sharing a mutable file with a stale holder is the one
			// thing a copy must never do.
			return bad("shares its inode with the source")
		}
		// The source as it was opened for the copy: not replaced, not
		// written since (a same-size write in place moves the mtime, one
		// with its mtime set back the ctime).
		if ss.Dev != m.srcDev || ss.Ino != m.srcIno {
			return bad("copied, but the source name is another file now (replaced since it was copied)")
		}
		if was := m.stamp; stampOf(&ss) != was {
			return bad("copied, but the source changed since it was copied (size %d→%d, mtime %v→%v, ctime %v→%v)",
				was.size, ss.Size, time.Unix(was.mtime.Unix()), time.Unix(ss.Mtim.Unix()),
				time.Unix(was.ctime.Unix()), time.Unix(ss.Ctim.Unix()))
		}
		if ss.Size != ds.Size {
			return bad("size %d in the target, %d in the source", ds.Size, ss.Size)
		}
		if t.cfg.verifyContent {
			same, err := sameContent(src, dst, name, &ss, &ds, t.cfg.steps)
			if err != nil {
				return err
			}
			if !same {
				return bad("content differs")
			}
		}
	}
	return nil
}

// validateSubdir opens the directory name in parent's source and target
// (owned by suid and duid: see openKeepingAtime) and validates it. It is
// one of parent's tasks.
func (t *tree) validateSubdir(parent *dirJob, name, rel string, suid, duid uint32) {
	if t.stopped() {
		parent.done()
		return
	}
	if err := parent.acquire(); err != nil {
		t.setErr(err)
		parent.done()
		return
	}
	s, sf, err := openKeepingAtime(parent.src, name, suid, true)
	if err != nil {
		parent.release()
		t.setErr(err)
		parent.done()
		return
	}
	d, df, err := openKeepingAtime(parent.dst, name, duid, true)
	parent.release()
	if err != nil {
		s.Close()
		t.setErr(err)
		parent.done()
		return
	}
	j, err := subJob(parent, name, rel, s, d, sf, df)
	if err != nil {
		s.Close()
		d.Close()
		t.setErr(err)
		parent.done()
		return
	}
	j.finish = (*dirJob).closeHeld
	j.start()
	t.validateList(j)
}

// recheck checks, after the marker was written, that everything validation
// found in the target is still there, with the same type and size. Another
// provider's GC (Camunda's deletes every directory without a valid marker)
// may have been deleting the target while it was flushed; a deletion after
// recheck still goes through (see docs/datadir.md).
func (t *tree) recheck() error {
	missing := maps.Clone(t.carried)
	var mu sync.Mutex // guards missing
	t.err = nil
	t.pool = newPool()
	top := &dirJob{dst: t.dstDir}
	top.start()
	t.pool.run(t.cfg.workers, func() { t.recheckDir(top, missing, &mu) })
	if err := t.firstErr(); err != nil {
		return err
	}
	if len(missing) > 0 {
		rel := slices.Min(slices.Collect(maps.Keys(missing)))
		return fmt.Errorf("%w: %s: gone from the target after validation (%d entries; deleted by another provider's garbage collection?)",
			ErrValidation, rel, len(missing))
	}
	return nil
}

// recheckDir deletes from missing what it finds, unchanged, below j.dst.
// It is one of j's tasks.
func (t *tree) recheckDir(j *dirJob, missing map[string]carriedEntry, mu *sync.Mutex) {
	defer j.done()
	defer j.release() // the hold of the task that opened j
	if t.stopped() {
		return
	}
	names, err := readDirNamesFlags(j.dst, j.dstFlags)
	if err != nil {
		t.setErr(err)
		return
	}
	step(t.cfg.steps)
	var batches []func()
	for b := range slices.Chunk(names, batch) {
		batches = append(batches, func() {
			if err := j.acquire(); err != nil {
				t.setErr(err)
				return
			}
			defer j.release()
			for _, name := range b {
				if t.stopped() {
					return
				}
				t.setErr(t.recheckEntry(j, name, missing, mu))
				step(t.cfg.steps)
			}
		})
	}
	j.spread(t.pool, batches, perDir)
}

func (t *tree) recheckEntry(j *dirJob, name string, missing map[string]carriedEntry, mu *sync.Mutex) error {
	rel := path.Join(j.rel, name)
	if j.rel == "" && (name == PreparingName || name == markerAsideName) {
		return nil
	}
	if _, ok := t.carried[rel]; !ok {
		// Planted since validation (read only: recheck writes carried
		// nowhere).
		return fmt.Errorf("%w: %s: in the target after validation, but not made by this preparation", ErrValidation, rel)
	}
	mu.Lock()
	want, ok := missing[rel]
	mu.Unlock()
	if !ok {
		return nil
	}
	var st unix.Stat_t
	switch err := fstatat(int(j.dst.Fd()), name, &st); {
	case errors.Is(err, fs.ErrNotExist):
		return nil // reported as missing
	case err != nil:
		return err
	}
	if typ := st.Mode & unix.S_IFMT; typ != want.typ || typ == unix.S_IFREG && st.Size != want.size {
		return fmt.Errorf("%w: %s changed after validation (type %#o, size %d; validated %#o, %d)",
			ErrValidation, rel, typ, st.Size, want.typ, want.size)
	}
	mu.Lock()
	delete(missing, rel)
	mu.Unlock()
	if want.typ != unix.S_IFDIR {
		return nil
	}
	// Opened by its own task, as the copy and validation do: opened here,
	// every subdirectory of a large directory would be open at once.
	j.start()
	uid := st.Uid
	t.pool.add(func() {
		if err := j.acquire(); err != nil {
			t.setErr(err)
			j.done()
			return
		}
		sub, flags, err := openKeepingAtime(j.dst, name, uid, true)
		j.release()
		switch {
		case errors.Is(err, fs.ErrNotExist):
			j.done() // what was below it is reported as missing
			return
		case err != nil:
			t.setErr(err)
			j.done()
			return
		}
		sj, err := subJob(j, name, rel, nil, sub, 0, flags)
		if err != nil {
			sub.Close()
			t.setErr(err)
			j.done()
			return
		}
		sj.finish = (*dirJob).closeHeld
		sj.start()
		t.recheckDir(sj, missing, mu)
	})
	return nil
}

// sameContent compares the file name in two directories byte by byte: as
// much I/O as a checksum of both, and no collisions. Each side must still
// be the regular file judged (sa, sb): the name is opened again, and a
// FIFO swapped in meanwhile would block the read for good. The reads keep
// the access times where permitted (openKeepingAtime). Each chunk compared
// is a step of progress.
func sameContent(a, b *os.File, name string, sa, sb *unix.Stat_t, steps *atomic.Int64) (bool, error) {
	fa, err := openJudgedKeepingAtime(a, name, sa)
	if err != nil {
		return false, err
	}
	defer fa.Close()
	fb, err := openJudgedKeepingAtime(b, name, sb)
	if err != nil {
		return false, err
	}
	defer fb.Close()
	const chunk = 1 << 20
	ba, bb := make([]byte, chunk), make([]byte, chunk)
	for {
		na, erra := io.ReadFull(fa, ba)
		nb, errb := io.ReadFull(fb, bb)
		step(steps)
		if !bytes.Equal(ba[:na], bb[:nb]) {
			return false, nil
		}
		endA := erra == io.EOF || erra == io.ErrUnexpectedEOF
		endB := errb == io.EOF || errb == io.ErrUnexpectedEOF
		switch {
		case erra != nil && !endA:
			return false, erra
		case errb != nil && !endB:
			return false, errb
		case endA || endB:
			return endA && endB, nil
		}
	}
}
