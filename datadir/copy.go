//go:build unix

package datadir

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// fileJob is an entry of a directory being copied that is not a directory.
type fileJob struct {
	name, rel string
	act       action
}

// copyDir lists j's source and queues its entries: subdirectories one task
// each, other entries in batches. It is one of j's tasks.
func (t *tree) copyDir(j *dirJob) {
	defer j.done()
	defer j.release() // the hold of the task that opened j
	if t.stopped() {
		return
	}
	if err := t.inPlace(); err != nil {
		t.setErr(err)
		return
	}
	entries, err := readDirEntries(j.src)
	if err != nil {
		t.setErr(err)
		return
	}
	step(t.cfg.steps)
	var files []fileJob
	for _, e := range entries {
		name := e.Name()
		rel := path.Join(j.rel, name)
		// The type from the directory listing (getdents: no round trip
		// per entry); copyFile checks it again on the open file.
		act := t.classify(rel, e.Type(), true)
		switch act {
		case actSkip:
			t.skipped.Add(1)
		case actSpecial:
			t.skipped.Add(1)
			t.log.Warn("leaving out a special file", "path", rel, "type", e.Type().String())
		case actDir:
			j.start()
			t.pool.add(func() { t.copySubdir(j, name, rel) })
		default:
			files = append(files, fileJob{name: name, rel: rel, act: act})
		}
	}
	var batches []func()
	for b := range slices.Chunk(files, batch) {
		batches = append(batches, func() {
			if err := j.acquire(); err != nil {
				t.setErr(err)
				return
			}
			defer j.release()
			for _, f := range b {
				if t.stopped() {
					return
				}
				t.setErr(t.copyEntry(j, f))
				step(t.cfg.steps)
			}
		})
	}
	// Links hold the directory's lock for all their round trips: one
	// runner per directory; copies do most of theirs outside it.
	limit := perDir
	if t.cfg.graceful {
		limit = 1
	}
	j.spread(t.pool, batches, limit)
}

// copyEntry copies, links or recreates one entry that is not a directory,
// once the target is still in place (inPlace).
func (t *tree) copyEntry(j *dirJob, f fileJob) error {
	if f.act == actSymlink {
		if err := t.inPlace(); err != nil {
			return err
		}
		var st unix.Stat_t
		if err := fstatat(int(j.src.Fd()), f.name, &st); err != nil {
			return err
		}
		if st.Nlink > 1 {
			return t.copyMultiNameSymlink(j, f, &st)
		}
		return t.copySymlink(j.src, j.dst, f.name, f.rel, &st)
	}
	if testHookFile != nil {
		t.hookMu.Lock()
		stop := t.stopped()
		if !stop {
			testHookFile(f.rel)
		}
		t.hookMu.Unlock()
		if stop {
			return nil
		}
	}
	if err := t.inPlace(); err != nil {
		return err
	}
	if f.act == actLink {
		// The type came from the listing: open the name itself (O_PATH,
		// not following a symlink) and link that inode, once fstat says
		// it is a regular file. A name swapped since for a FIFO, a device
		// or a symlink is never linked.
		fd, err := unix.Openat(int(j.src.Fd()), f.name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "openat", Path: path.Join(t.src, f.rel), Err: err}
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if t.cfg.graceful {
			// Type, device and inode number never change: cached
			// attributes do (no round trip on NFS or FUSE).
			err = fstatCached(fd, &st)
		} else {
			err = unix.Fstat(fd, &st)
		}
		if err != nil {
			return &os.PathError{Op: "fstat", Path: path.Join(t.src, f.rel), Err: err}
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return fmt.Errorf("%w: %s is no longer a regular file (type %#o)", ErrValidation, f.rel, st.Mode&unix.S_IFMT)
		}
		// Linked after a crash only with one name and settled.
		if t.cfg.graceful || t.shareable(&st) {
			err := t.link(fd, &st, j.dst, f.name, f.rel)
			switch {
			case errors.Is(err, unix.EXDEV):
				// On another mount (a mount point inside the source): no
				// link can reach it, so its content is copied, as cp -a
				// and copy mode do.
			case errors.Is(err, unix.EPERM):
				// Not ours to link: another user's file we may not write
				// (fs.protected_hardlinks), or an immutable one. Failing
				// would fail every preparation for good; cp -a copies it.
				t.linkRefused.Add(1)
			default:
				return err
			}
		}
	}
	return t.copyFile(j, f.name, f.rel)
}

// linkToCopy makes name in dst another name of the copy f, as the source's
// names are of one inode (cp -a).
func (t *tree) linkToCopy(f *firstCopy, dst *os.File, name, rel string) error {
	dir := f.dir
	if dir == nil {
		d, err := t.reopenMadeDir(f.dirRel)
		if err != nil {
			return err
		}
		defer d.Close()
		dir = d
	}
	if err := unix.Linkat(int(dir.Fd()), f.name, int(dst.Fd()), name, 0); err != nil {
		return &os.LinkError{Op: "linkat", Old: path.Join(dir.Name(), f.name), New: path.Join(t.dst, rel), Err: err}
	}
	t.record(rel, made{act: actCopy, typ: unix.S_IFREG, dev: f.dev, ino: f.ino,
		stamp: f.src.stamp, srcDev: f.src.dev, srcIno: f.src.ino})
	t.filesCopied.Add(1) // a name of a copied file; its bytes are counted once
	return nil
}

// firstCopyOf registers the copy of a multi-name source file: the first name
// seen is copied (first true); a later one is linked to that copy once it
// is done, by a task queued then (waiting would hold a worker).
// A later name of a copy already finished comes back with done set, and
// the copy's error.
func (t *tree) firstCopyOf(st *unix.Stat_t, j *dirJob, name, rel string) (f *firstCopy, first, done bool, err error) {
	k := inodeKey{uint64(st.Dev), uint64(st.Ino), stampOf(st)}
	t.copiesMu.Lock()
	defer t.copiesMu.Unlock()
	if f, ok := t.copies[k]; ok {
		if f.finished {
			return f, false, true, f.err
		}
		j.start()
		f.waiters = append(f.waiters, waiter{j: j, name: name, rel: rel})
		return f, false, false, nil
	}
	// j.dst is closed when its walk ends; the later names may be elsewhere.
	// At most maxHeld are held; the others are opened again when needed.
	held, ok := t.held[j]
	if !ok && len(t.held) < maxHeld {
		fd, err := unix.FcntlInt(j.dst.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			t.setErr(&os.PathError{Op: "fcntl", Path: j.dst.Name(), Err: err})
			held = j.dst // not reached: the walk stops on the error
		} else {
			held = os.NewFile(uintptr(fd), j.dst.Name())
			t.held[j] = held
		}
	}
	f = &firstCopy{src: k, dir: held, dirRel: j.rel, name: name}
	t.copies[k] = f
	return f, true, false, nil
}

// copied ends the first copy f with err and queues the later names.
func (t *tree) copied(f *firstCopy, err error) {
	t.copiesMu.Lock()
	f.finished, f.err = true, err
	ws := f.waiters
	f.waiters = nil
	t.copiesMu.Unlock()
	for _, w := range ws {
		t.pool.add(func() {
			defer w.j.done()
			if err != nil || t.stopped() {
				return
			}
			if err := w.j.acquire(); err != nil {
				t.setErr(err)
				return
			}
			defer w.j.release()
			t.setErr(t.linkToCopy(f, w.j.dst, w.name, w.rel))
		})
	}
}

func (t *tree) firstErr() error {
	t.errMu.Lock()
	defer t.errMu.Unlock()
	return t.err
}

// setErr keeps the first non-nil error.
func (t *tree) setErr(err error) {
	if err == nil {
		return
	}
	t.errMu.Lock()
	defer t.errMu.Unlock()
	if t.err == nil {
		t.err = err
	}
}

// copySubdir creates the directory name in parent's target, owner-only
// until it is filled, and queues its entries. Once they are all done it
// gets the source's times and mode (mode last, so that a read-only source
// directory can be filled). It is one of parent's tasks.
func (t *tree) copySubdir(parent *dirJob, name, rel string) {
	if t.stopped() {
		parent.done()
		return
	}
	if err := parent.acquire(); err != nil {
		t.setErr(err)
		parent.done()
		return
	}
	j, dst, err := t.openSubdir(parent, name, rel)
	parent.release()
	if err != nil {
		t.setErr(err)
		parent.done()
		return
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(j.src.Fd()), &st); err != nil {
		t.setErr(&os.PathError{Op: "fstat", Path: j.src.Name(), Err: err})
	}
	j.finish = func(j *dirJob) {
		defer j.closeHeld()
		if t.firstErr() != nil {
			return
		}
		if err := j.acquire(); err != nil {
			t.setErr(err)
			return
		}
		defer j.release()
		if err := t.inPlace(); err != nil {
			t.setErr(err)
			return
		}
		t.setErr(t.finishDir(j.dst, &dst, &st, rel))
	}
	t.copyDir(j)
}

// openSubdir makes the target directory name and opens it and the
// source's; st is the target's fstat.
func (t *tree) openSubdir(parent *dirJob, name, rel string) (_ *dirJob, st unix.Stat_t, _ error) {
	if err := t.inPlace(); err != nil {
		return nil, st, err
	}
	if err := unix.Mkdirat(int(parent.dst.Fd()), name, 0o700); err != nil {
		return nil, st, &os.PathError{Op: "mkdirat", Path: path.Join(t.dst, rel), Err: err}
	}
	if testHookAfterSubdirMkdir != nil {
		testHookAfterSubdirMkdir(rel)
	}
	s, err := openDirAt(parent.src, name)
	if err != nil {
		return nil, st, err
	}
	d, err := openDirAt(parent.dst, name)
	if err == nil {
		// Something may have been mounted over the name since mkdirat:
		// nothing is written, chmodded or recorded there.
		if err = checkNotMount(d, "", t.dstMount); err != nil {
			d.Close()
		}
	}
	if err != nil {
		s.Close()
		return nil, st, err
	}
	if err := unix.Fstat(int(d.Fd()), &st); err != nil {
		s.Close()
		d.Close()
		return nil, st, &os.PathError{Op: "fstat", Path: path.Join(t.dst, rel), Err: err}
	}
	// The open is by name, as in makeDir: a directory swapped in since
	// mkdirat is neither written into nor recorded as made.
	if err := t.checkFreshSubdir(parent.dst, d, name, &st, rel); err != nil {
		s.Close()
		d.Close()
		return nil, st, err
	}
	t.record(rel, made{act: actDir, typ: unix.S_IFDIR, dev: st.Dev, ino: st.Ino})
	j, err := subJob(parent, name, rel, s, d, 0, 0)
	if err != nil {
		s.Close()
		d.Close()
		return nil, st, err
	}
	j.start()
	return j, st, nil
}

// testHookAfterSubdirMkdir runs after openSubdir made a target directory,
// before it opens it by name.
var testHookAfterSubdirMkdir func(rel string)

// checkFreshSubdir checks that the target directory d (st its fstat), just
// made by mkdirat as name in parent and opened by name, looks as made
// (docs/datadir.md, "Fresh subdirectories"): empty; owned by us (the
// target's owner, which keeps the preparing owner until the walk is done,
// or our euid); no mode bits beyond mkdirat's 0700 (and a setgid bit the
// parent may pass on), write bits for group or others included, unless
// this file system gives every new directory exactly that mode
// (probeMkdirMode); and
// the name still leads to d. Another directory swapped in is ErrValidation.
func (t *tree) checkFreshSubdir(parent, d *os.File, name string, st *unix.Stat_t, rel string) error {
	replaced := func() error {
		return fmt.Errorf("%w: %s: replaced in the target right after it was made (owner %d, mode %#o)",
			ErrValidation, rel, st.Uid, st.Mode&0o7777)
	}
	if st.Uid != t.dstStat.Uid && st.Uid != uint32(os.Geteuid()) {
		return replaced()
	}
	// Group or other write bits too are accepted only where mkdirat(0700)
	// gives exactly this mode (CIFS dir_mode=0777): every directory on
	// such a file system has them, so refusing protects nothing there.
	if extra := st.Mode & 0o7777 &^ (0o700 | unix.S_ISGID); extra != 0 {
		t.mkdirModeOnce.Do(func() { t.mkdirMode, t.mkdirModeErr = probeMkdirMode(parent) })
		if t.mkdirModeErr != nil {
			return t.mkdirModeErr
		}
		if st.Mode&0o7777&^unix.S_ISGID != t.mkdirMode&^unix.S_ISGID {
			return replaced()
		}
	}
	switch empty, err := isEmpty(d); {
	case err != nil:
		return err
	case !empty:
		return fmt.Errorf("%w: %s: replaced in the target right after it was made (%w)", ErrValidation, rel, errNotFresh)
	}
	var now unix.Stat_t
	if err := fstatat(int(parent.Fd()), name, &now); err != nil {
		return err
	}
	if now.Dev != st.Dev || now.Ino != st.Ino {
		return fmt.Errorf("%w: %s: replaced in the target right after it was opened", ErrValidation, rel)
	}
	return nil
}

// probeMkdirMode makes a directory with mkdirat(0700) in dir, a directory
// of the target, reads the mode it got and removes it: on a file system
// with a fixed directory mode, every directory the copy makes has that
// mode, not 0700.
func probeMkdirMode(dir *os.File) (uint32, error) {
	name := ".nodeid-mkdir-mode-" + strconv.FormatUint(rand.Uint64(), 16)
	if err := unix.Mkdirat(int(dir.Fd()), name, 0o700); err != nil {
		return 0, &os.PathError{Op: "mkdirat", Path: path.Join(dir.Name(), name), Err: err}
	}
	var st unix.Stat_t
	err := fstatat(int(dir.Fd()), name, &st)
	if rerr := unix.Unlinkat(int(dir.Fd()), name, unix.AT_REMOVEDIR); err == nil && rerr != nil {
		err = &os.PathError{Op: "rmdir", Path: path.Join(dir.Name(), name), Err: rerr}
	}
	return st.Mode & 0o7777, err
}

// copySymlink recreates a symlink after checking that it stays inside, with
// the owner and times of the source link (st), as cp -a does.
func (t *tree) copySymlink(src, dst *os.File, name, rel string, st *unix.Stat_t) error {
	target, err := readlinkat(int(src.Fd()), name)
	if err != nil {
		return err
	}
	if err := checkSymlink(t.srcRoot, rel, target); err != nil {
		return err
	}
	if err := unix.Symlinkat(target, int(dst.Fd()), name); err != nil {
		return &os.PathError{Op: "symlinkat", Path: path.Join(t.dst, rel), Err: err}
	}
	t.symlinks.Add(1)
	return t.finishSymlink(dst, name, rel, target, st)
}

// copyFile copies a regular file of j: copy_file_range(2), then the
// source's owner, mode and times, through the copy's descriptor. A file
// with several names is copied once, at its first name (see firstCopyOf).
// The source's inode and stamp as opened are recorded: validation fails
// if it was written since (see validateEntry).
func (t *tree) copyFile(j *dirJob, name, rel string) (err error) {
	src, dst := j.src, j.dst
	// O_NONBLOCK: a file swapped for a FIFO must not block the open.
	sfd, err := unix.Openat(int(src.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "openat", Path: path.Join(t.src, rel), Err: err}
	}
	sf := os.NewFile(uintptr(sfd), path.Join(t.src, rel))
	defer sf.Close()
	var st unix.Stat_t
	if err := unix.Fstat(sfd, &st); err != nil {
		return &os.PathError{Op: "fstat", Path: sf.Name(), Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%w: %s is no longer a regular file", ErrValidation, rel)
	}
	var f *firstCopy
	if st.Nlink > 1 {
		var first, done bool
		var ferr error
		f, first, done, ferr = t.firstCopyOf(&st, j, name, rel)
		switch {
		case !first && !done:
			return nil // linked by copied
		case !first && ferr != nil:
			return ferr
		case !first:
			return t.linkToCopy(f, dst, name, rel)
		}
		defer func() { t.copied(f, err) }()
	}
	dfd, err := unix.Openat(int(dst.Fd()), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return &os.PathError{Op: "create", Path: path.Join(t.dst, rel), Err: err}
	}
	df := os.NewFile(uintptr(dfd), path.Join(t.dst, rel))
	defer func() {
		if cerr := df.Close(); err == nil {
			err = cerr
		}
	}()
	var dst0 unix.Stat_t
	if err := unix.Fstat(dfd, &dst0); err != nil {
		return &os.PathError{Op: "fstat", Path: df.Name(), Err: err}
	}
	t.record(rel, made{act: actCopy, typ: unix.S_IFREG, dev: dst0.Dev, ino: dst0.Ino,
		stamp: stampOf(&st), srcDev: st.Dev, srcIno: st.Ino})
	if f != nil {
		f.dev, f.ino = dst0.Dev, dst0.Ino // read by later names after copied
	}
	t.filesCopied.Add(1)
	t.bytesCopied.Add(st.Size)
	if err := copyData(df, sf, &st, t.cfg.steps); err != nil {
		return err
	}
	if err := copyXattrs(sfd, dfd); err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	kept, err := t.keepOwner(dfd, false, &st, &dst0, rel)
	if err != nil {
		return err
	}
	if err := unix.Fchmod(dfd, copyMode(&st, kept)); err != nil {
		return &os.PathError{Op: "fchmod", Path: df.Name(), Err: err}
	}
	if err := futimens(dfd, &st); err != nil {
		return &os.PathError{Op: "futimens", Path: df.Name(), Err: err}
	}
	return nil
}

// checkSymlink refuses a link that is absolute or resolves outside the
// version directory r. A link that stays inside is harmless to recreate: it
// points into the new directory, not the old one. One that does not resolve
// (dangling, a loop, a path through a file) is judged without following
// what does not exist (see escapes): cp -a copies it.
func checkSymlink(r *os.Root, rel, target string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: %s -> %s: %s", ErrUnsafeSymlink, rel, target, why)
	}
	if target == "" || filepath.IsAbs(target) {
		return bad("absolute or empty")
	}
	joined := path.Join(path.Dir(rel), filepath.ToSlash(target))
	if joined == ".." || strings.HasPrefix(joined, "../") {
		return bad("points above the data directory")
	}
	// Resolution can escape where the lexical path does not (a/.. after a
	// symlink a -> .).
	why, err := escapes(r, rel, filepath.ToSlash(target))
	switch {
	case err != nil:
		return bad(err.Error())
	case why != "":
		return bad(why)
	}
	return nil
}

// firstSymlink is the first target name of a symlink with several names
// in the source (a hard link to a symlink). mu is held while it is made.
type firstSymlink struct {
	mu       sync.Mutex
	ok       bool // made
	dirRel   string
	name     string
	dev, ino uint64
}

// copyMultiNameSymlink recreates a symlink with several names as cp -a
// does: the first name seen as a new symlink (copySymlink), every later
// one as a hard link of that symlink in the target (linkat without
// AT_SYMLINK_FOLLOW links the symlink itself), checked to be that inode.
func (t *tree) copyMultiNameSymlink(j *dirJob, f fileJob, st *unix.Stat_t) error {
	k := inodeKey{uint64(st.Dev), uint64(st.Ino), stampOf(st)}
	t.copiesMu.Lock()
	s, later := t.symlinkNames[k]
	if !later {
		s = &firstSymlink{dirRel: j.rel, name: f.name}
		s.mu.Lock() // before anyone can find it
		t.symlinkNames[k] = s
	}
	t.copiesMu.Unlock()
	if !later {
		defer s.mu.Unlock()
		if err := t.copySymlink(j.src, j.dst, f.name, f.rel, st); err != nil {
			return err
		}
		m, _ := t.madeAs(f.rel)
		s.ok, s.dev, s.ino = true, m.dev, m.ino
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ok {
		return nil // the first failed: the walk stops on its error
	}
	dir := j.dst
	if s.dirRel != j.rel {
		d, err := t.reopenMadeDir(s.dirRel)
		if err != nil {
			return err
		}
		defer d.Close()
		dir = d
	}
	if err := unix.Linkat(int(dir.Fd()), s.name, int(j.dst.Fd()), f.name, 0); err != nil {
		return &os.LinkError{Op: "linkat", Old: path.Join(t.dst, s.dirRel, s.name), New: path.Join(t.dst, f.rel), Err: err}
	}
	// The first name may have been swapped since it was made: what was
	// linked must be the symlink made.
	var now unix.Stat_t
	if err := fstatat(int(j.dst.Fd()), f.name, &now); err != nil {
		return err
	}
	if now.Mode&unix.S_IFMT != unix.S_IFLNK || now.Dev != s.dev || now.Ino != s.ino {
		return fmt.Errorf("%w: %s: not the symlink made at %s (replaced in the target meanwhile)", ErrValidation, f.rel, path.Join(s.dirRel, s.name))
	}
	t.record(f.rel, made{act: actSymlink, typ: unix.S_IFLNK, dev: now.Dev, ino: now.Ino})
	t.symlinks.Add(1)
	return nil
}
