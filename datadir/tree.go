//go:build unix

package datadir

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Test hooks; nil outside tests.
var (
	testHookFile           func(rel string) // before each regular file is copied or linked
	testHookBeforeValidate func(dir string)
	testHookAfterMkdir     func(dir string) // after Prepare created its target
	testHookAfterCreateIP  func(dir string) // after Prepare created its in-progress file, before its fstatat
	testHookAfterMarker    func(dir string) // after Prepare wrote its marker, before its recheck
)

// tree copies one version directory of a node to another and validates the
// result. Both trees are walked and written through directory descriptors
// (openat, mkdirat, linkat, symlinkat, fchmod, utimensat), never by path
// and never following a symlink, and every target entry is created with
// O_EXCL or its equivalent: an entry planted in the target meanwhile makes
// the copy fail instead of redirecting a write, inside the root or out of it.
type tree struct {
	ctx      context.Context
	cfg      *config
	log      *slog.Logger
	node     *os.Root
	src, dst string // version directory names in node
	dstPath  string // dst as a path, for the test hook

	// The source and target as Prepare inspected and created them.
	srcDir, dstDir *os.File

	srcRoot *os.Root // the source, to resolve symlink chains in checkSymlink

	pool   *pool // runs the walk's tasks on up to Workers goroutines
	errMu  sync.Mutex
	err    error      // the first error of the walk
	hookMu sync.Mutex // testHookFile is called by one goroutine at a time

	// Copied files with several names in the source, by source inode: the
	// first target name, so that later names become links to it (cp -a).
	copiesMu sync.Mutex
	copies   map[inodeKey]*firstCopy
	held     map[*os.File]*os.File // target directories firstCopy entries name, duplicated; closed at the end

	// Every target entry this preparation made, by relative path:
	// validation judges the target's entries against it.
	madeMu sync.Mutex
	made   map[string]made

	// What validation found in the target, by relative path, for recheck.
	carriedMu sync.Mutex
	carried   map[string]carriedEntry

	filesCopied, bytesCopied atomic.Int64
	filesLinked, bytesLinked atomic.Int64
	symlinks, skipped        atomic.Int64
}

// inodeKey identifies a source inode during the walk: an inode number is
// given to a new file once every name of the old one is gone, and the new
// file differs in its stamp (its ctime at least).
type inodeKey struct {
	dev, ino uint64
	stamp    linkStamp
}

// linkStamp is what a write (size, mtime) or a set-back mtime or new name
// (ctime) changes on an inode.
type linkStamp struct {
	size         int64
	mtime, ctime unix.Timespec
}

func stampOf(st *unix.Stat_t) linkStamp {
	return linkStamp{size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}

// made is a target entry as this preparation made it: how (actDir,
// actSymlink, actLink, actCopy), its type, its inode (not for a symlink)
// and, for a link, its stamp right after the linkat.
type made struct {
	act      action
	typ      uint32
	dev, ino uint64
	stamp    linkStamp
}

func (t *tree) record(rel string, m made) {
	t.madeMu.Lock()
	t.made[rel] = m
	t.madeMu.Unlock()
}

func (t *tree) madeAs(rel string) (made, bool) {
	t.madeMu.Lock()
	defer t.madeMu.Unlock()
	m, ok := t.made[rel]
	return m, ok
}

// carriedEntry is a validated target entry: its type and, for a regular
// file, its size.
type carriedEntry struct {
	typ  uint32
	size int64
}

// firstCopy is the first target name of a copied multi-name source file.
// Until finished, later names wait in waiters; err is the copy's result.
type firstCopy struct {
	dir      *os.File
	name     string
	dev, ino uint64 // the copy's, once finished
	finished bool
	err      error
	waiters  []waiter
}

// waiter is a later name of a firstCopy, in the directory j.
type waiter struct {
	j         *dirJob
	name, rel string
}

// action is what happens to one entry of the source tree. Copy and
// validation classify entries with the same function, so they cannot
// disagree about what the target must contain.
type action int

const (
	actSkip    action = iota // left out by configuration
	actSpecial               // not a regular file, directory or symlink: left out
	actDir
	actSymlink
	actLink // hard link
	actCopy
)

// shareable says whether the source file, if its name is immutable, may be
// linked after an ungraceful takeover (see shareable).
func (t *tree) classify(rel string, mode fs.FileMode, shareable bool) action {
	switch {
	case rel == MarkerName || rel == PreparingName:
		// The target gets its own, and a stale in-progress file in a valid
		// source (a crash just after its marker) means nothing.
		return actSkip
	case matchAny(t.cfg.skip, rel), t.cfg.rules.skips(rel):
		return actSkip
	case mode.IsDir():
		return actDir
	case mode&fs.ModeSymlink != 0:
		return actSymlink
	case !mode.IsRegular():
		return actSpecial
	case t.cfg.graceful || shareable && (matchAny(t.cfg.immutable, rel) || t.cfg.rules.linksAfterCrash(rel)):
		// Safe to share: nobody writes the source file any more.
		return actLink
	}
	return actCopy
}

// shareable reports whether a regular file with an immutable name may be
// linked after an ungraceful takeover. Not if it has another name, through
// which a stale holder may write it (perhaps outside the source); nor, with
// SettleTime, if it changed recently: it may still be being written.
func (t *tree) shareable(st *unix.Stat_t) bool {
	return st.Nlink == 1 && t.settled(st)
}

// settled reports whether st's mtime and ctime (which a write through any
// descriptor, or a new name, moves on) are before the SettleTime cutoff.
func (t *tree) settled(st *unix.Stat_t) bool {
	if t.cfg.settledBefore.IsZero() {
		return true
	}
	cut := t.cfg.settledBefore.UnixNano()
	return st.Mtim.Nano() < cut && st.Ctim.Nano() < cut
}

func (t *tree) copyAndValidate(res *Result) (err error) {
	if t.srcRoot, err = openRootAt(t.node, t.src, t.srcDir); err != nil {
		return fmt.Errorf("datadir: %w", err)
	}
	defer t.srcRoot.Close()
	t.copies = map[inodeKey]*firstCopy{}
	t.held = map[*os.File]*os.File{}
	t.made = map[string]made{}
	defer func() {
		for _, d := range t.held {
			d.Close()
		}
	}()
	defer func() {
		res.FilesCopied, res.BytesCopied = t.filesCopied.Load(), t.bytesCopied.Load()
		res.FilesLinked, res.BytesLinked = t.filesLinked.Load(), t.bytesLinked.Load()
		res.Symlinks, res.Skipped = t.symlinks.Load(), t.skipped.Load()
	}()

	stop := t.logProgress()
	err = t.copyTop()
	stop()
	if err != nil {
		return fmt.Errorf("datadir: copying %s to %s: %w", t.src, t.dst, err)
	}
	if testHookBeforeValidate != nil {
		testHookBeforeValidate(t.dstPath)
	}
	return t.validate()
}

// copyTop copies the contents of the source into the existing target and
// gives the target the source's times, as cp -a does. Its mode is Prepare's.
// Directories are listed, and files copied or linked, by up to Workers
// goroutines: on NFS each of those system calls is a round trip, and
// they overlap.
func (t *tree) copyTop() error {
	var st unix.Stat_t
	if err := unix.Fstat(int(t.srcDir.Fd()), &st); err != nil {
		return &os.PathError{Op: "fstat", Path: t.srcDir.Name(), Err: err}
	}
	t.err = nil
	t.pool = newPool()
	top := &dirJob{src: t.srcDir, dst: t.dstDir, finish: func(*dirJob) {
		if t.firstErr() == nil {
			t.setErr(setTimes(t.dstDir, ".", &st))
		}
	}}
	top.start()
	t.pool.run(t.cfg.workers, func() { t.copyDir(top) })
	return t.firstErr()
}

// stopped reports whether the walk is to end: an error, or the context.
func (t *tree) stopped() bool {
	if t.firstErr() != nil {
		return true
	}
	if err := t.ctx.Err(); err != nil {
		t.setErr(err)
		return true
	}
	return false
}

// fileJob is an entry of a directory being copied that is not a directory.
type fileJob struct {
	name, rel string
	act       action
}

// copyDir lists j's source and queues its entries: subdirectories one task
// each, other entries in batches. It is one of j's tasks.
func (t *tree) copyDir(j *dirJob) {
	defer j.done()
	if t.stopped() {
		return
	}
	entries, err := readDirEntries(j.src)
	if err != nil {
		t.setErr(err)
		return
	}
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
			t.log.Warn("datadir: leaving out a special file", "path", rel, "type", e.Type().String())
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
			for _, f := range b {
				if t.stopped() {
					return
				}
				t.setErr(t.copyEntry(j, f))
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

// copyEntry copies, links or recreates one entry that is not a directory.
func (t *tree) copyEntry(j *dirJob, f fileJob) error {
	if f.act == actSymlink {
		var st unix.Stat_t
		if err := fstatat(int(j.src.Fd()), f.name, &st); err != nil {
			return err
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
			return t.link(fd, &st, j.dst, f.name, f.rel)
		}
	}
	return t.copyFile(j, f.name, f.rel)
}

// linkToCopy makes name in dst another name of the copy f, as the source's
// names are of one inode (cp -a).
func (t *tree) linkToCopy(f *firstCopy, dst *os.File, name, rel string) error {
	if err := unix.Linkat(int(f.dir.Fd()), f.name, int(dst.Fd()), name, 0); err != nil {
		return &os.LinkError{Op: "linkat", Old: path.Join(f.dir.Name(), f.name), New: path.Join(t.dst, rel), Err: err}
	}
	t.record(rel, made{act: actCopy, typ: unix.S_IFREG, dev: f.dev, ino: f.ino})
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
	held, ok := t.held[j.dst]
	if !ok {
		fd, err := unix.FcntlInt(j.dst.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			t.setErr(&os.PathError{Op: "fcntl", Path: j.dst.Name(), Err: err})
			held = j.dst // not reached: the walk stops on the error
		} else {
			held = os.NewFile(uintptr(fd), j.dst.Name())
			t.held[j.dst] = held
		}
	}
	f = &firstCopy{dir: held, name: name}
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
			if err == nil && !t.stopped() {
				t.setErr(t.linkToCopy(f, w.j.dst, w.name, w.rel))
			}
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
	j, err := t.openSubdir(parent, name, rel)
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
		defer j.src.Close()
		defer j.dst.Close()
		if t.firstErr() != nil {
			return
		}
		t.setErr(setTimes(parent.dst, name, &st))
		if err := unix.Fchmod(int(j.dst.Fd()), uint32(st.Mode&0o7777)); err != nil {
			t.setErr(&os.PathError{Op: "fchmod", Path: path.Join(t.dst, rel), Err: err})
		}
	}
	t.copyDir(j)
}

// openSubdir makes the target directory name and opens it and the source's.
func (t *tree) openSubdir(parent *dirJob, name, rel string) (*dirJob, error) {
	if err := unix.Mkdirat(int(parent.dst.Fd()), name, 0o700); err != nil {
		return nil, &os.PathError{Op: "mkdirat", Path: path.Join(t.dst, rel), Err: err}
	}
	s, err := openDirAt(parent.src, name)
	if err != nil {
		return nil, err
	}
	d, err := openDirAt(parent.dst, name)
	if err != nil {
		s.Close()
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(d.Fd()), &st); err != nil {
		s.Close()
		d.Close()
		return nil, &os.PathError{Op: "fstat", Path: path.Join(t.dst, rel), Err: err}
	}
	t.record(rel, made{act: actDir, typ: unix.S_IFDIR, dev: st.Dev, ino: st.Ino})
	j := &dirJob{parent: parent, src: s, dst: d, name: name, rel: rel}
	j.start()
	return j, nil
}

// copySymlink recreates a symlink after checking that it stays inside, with
// the times of the source link (st), as cp -a does.
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
	t.record(rel, made{act: actSymlink, typ: unix.S_IFLNK})
	t.symlinks.Add(1)
	return setTimes(dst, name, st)
}

// copyFile copies a regular file of j: copy_file_range(2), then the
// source's mode and times. A file with several names is copied once, at
// its first name (see firstCopyOf).
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
	t.record(rel, made{act: actCopy, typ: unix.S_IFREG, dev: dst0.Dev, ino: dst0.Ino})
	if f != nil {
		f.dev, f.ino = dst0.Dev, dst0.Ino // read by later names after copied
	}
	t.filesCopied.Add(1)
	t.bytesCopied.Add(st.Size)
	if err := copyData(df, sf, &st); err != nil {
		return err
	}
	if err := copyXattrs(sfd, dfd); err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	mode, err := copyMode(dfd, &st)
	if err != nil {
		return &os.PathError{Op: "fstat", Path: df.Name(), Err: err}
	}
	if err := unix.Fchmod(dfd, mode); err != nil {
		return &os.PathError{Op: "fchmod", Path: df.Name(), Err: err}
	}
	return setTimes(dst, name, &st)
}

// copyMode is the mode a copy (fd) of the source file st gets: the
// source's, without setuid, setgid and sticky if the copy's owner or group
// differs from the source's. Copies are owned by the copier, and a setuid
// program of another user must not become one of ours (as chown(2) and
// cp -p drop these bits too).
func copyMode(fd int, st *unix.Stat_t) (uint32, error) {
	mode := st.Mode & 0o7777
	if mode&(unix.S_ISUID|unix.S_ISGID|unix.S_ISVTX) == 0 {
		return mode, nil
	}
	var cst unix.Stat_t
	if err := unix.Fstat(fd, &cst); err != nil {
		return 0, err
	}
	if cst.Uid != st.Uid || cst.Gid != st.Gid {
		mode &^= unix.S_ISUID | unix.S_ISGID | unix.S_ISVTX
	}
	return mode, nil
}

// link hard-links the open source file fd (O_PATH, a regular file) into
// the target as name: that very inode, whatever its source name is now
// (linkat AT_EMPTY_PATH, or /proc/self/fd where that is not permitted).
// It records what it made for validation: the inode and, after an
// ungraceful takeover, its stamp right after the link: a stale holder's
// write after that point can set the mtime back, not the ctime. (After a
// graceful one nobody writes it, and linking every name of a multi-name
// file would move its ctime anyway.)
func (t *tree) link(fd int, st *unix.Stat_t, dst *os.File, name, rel string) error {
	if err := linkFd(fd, int(dst.Fd()), name); err != nil {
		return &os.LinkError{Op: "linkat", Old: path.Join(t.src, rel), New: path.Join(t.dst, rel), Err: err}
	}
	m := made{act: actLink, typ: unix.S_IFREG, dev: st.Dev, ino: st.Ino}
	if !t.cfg.graceful {
		var now unix.Stat_t
		if err := unix.Fstat(fd, &now); err != nil {
			return &os.PathError{Op: "fstat", Path: path.Join(t.src, rel), Err: err}
		}
		m.stamp = stampOf(&now)
	}
	t.record(rel, m)
	// Its bytes are counted by validation, which stats it anyway.
	t.filesLinked.Add(1)
	return nil
}

// fstatCached fills the type, device and inode number of st from fd's
// attributes as the kernel has them, without asking a network file
// system's server (statx AT_STATX_DONT_SYNC): those never change.
func fstatCached(fd int, st *unix.Stat_t) error {
	var sx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, unix.STATX_TYPE|unix.STATX_INO, &sx); err != nil {
		return err
	}
	*st = unix.Stat_t{Dev: unix.Mkdev(sx.Dev_major, sx.Dev_minor), Ino: sx.Ino, Mode: uint32(sx.Mode)}
	return nil
}

// noEmptyPathLink is set once linkat AT_EMPTY_PATH was refused (it needs
// CAP_DAC_READ_SEARCH before Linux 6.10).
var noEmptyPathLink atomic.Bool

// linkFd makes name in dirfd a hard link of the inode open as fd.
func linkFd(fd, dirfd int, name string) error {
	if !noEmptyPathLink.Load() {
		err := unix.Linkat(fd, "", dirfd, name, unix.AT_EMPTY_PATH)
		if err != unix.EPERM {
			return err
		}
		noEmptyPathLink.Store(true)
	}
	return unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), dirfd, name, unix.AT_SYMLINK_FOLLOW)
}

// setTimes gives the entry name of dir the access and modification times
// of st, without following a symlink.
func setTimes(dir *os.File, name string, st *unix.Stat_t) error {
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if err := unix.UtimesNanoAt(int(dir.Fd()), name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "utimensat", Path: path.Join(dir.Name(), name), Err: err}
	}
	return nil
}

// checkSymlink refuses a link that is absolute or resolves outside the
// version directory r. A link that stays inside is harmless to recreate: it
// points into the new directory, not the old one. A dangling link is
// accepted if it stays inside lexically: os.Root reports an escape before it
// reports a missing file, so a dangling link cannot hide an escape.
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
	// symlink a -> .); os.Root follows the chain and refuses to leave r.
	_, err := r.Stat(rel)
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return bad(err.Error())
}

// logProgress logs files and bytes done at the configured interval until
// the returned function is called.
func (t *tree) logProgress() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() {
		tick := time.NewTicker(t.cfg.progress)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				t.log.Info("datadir: copying",
					"files_copied", t.filesCopied.Load(), "bytes_copied", t.bytesCopied.Load(),
					"files_linked", t.filesLinked.Load(), "bytes_linked", t.bytesLinked.Load(),
					"elapsed", time.Since(start).Round(time.Millisecond))
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// validate walks the source and the target again. Every entry of the
// source that should have been carried over must be in the target, and
// every entry of the target must be one this preparation made (see made)
// and still be as it made it: directories, symlinks with the source's
// target, hard links to the source's inode unchanged since linked, copies
// with the source's size (and content, if configured). A target entry
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
	if t.stopped() {
		return
	}
	entries, err := readDirEntries(j.src)
	if err != nil {
		t.setErr(err)
		return
	}
	names, err := readDirNames(j.dst)
	if err != nil {
		t.setErr(err)
		return
	}
	inSource := make(map[string]bool, len(entries))
	for _, e := range entries {
		inSource[e.Name()] = true
	}
	slices.Sort(names)
	for _, name := range names {
		if inSource[name] || j.rel == "" && name == PreparingName {
			continue
		}
		rel := path.Join(j.rel, name)
		if _, ok := t.madeAs(rel); ok {
			t.setErr(fmt.Errorf("%w: %s: in the target, but gone from the source since it was carried over (deleted or renamed meanwhile): cannot be proven current", ErrValidation, rel))
		} else {
			t.setErr(fmt.Errorf("%w: %s: in the target, but not made by this preparation", ErrValidation, rel))
		}
		return
	}
	var batches []func()
	for b := range slices.Chunk(entries, batch) {
		batches = append(batches, func() {
			for _, e := range b {
				if t.stopped() {
					return
				}
				t.setErr(t.validateEntry(j, e))
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
	if err := fstatat(sfd, name, &ss); err != nil {
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
	if m.act != actSymlink && (ds.Dev != m.dev || ds.Ino != m.ino) {
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
		t.pool.add(func() { t.validateSubdir(j, name, rel) })
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
		if err := checkSymlink(t.srcRoot, rel, st); err != nil {
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
		if ss.Size != ds.Size {
			return bad("size %d in the target, %d in the source", ds.Size, ss.Size)
		}
		if t.cfg.verifyContent {
			same, err := sameContent(src, dst, name)
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
// and validates it. It is one of parent's tasks.
func (t *tree) validateSubdir(parent *dirJob, name, rel string) {
	if t.stopped() {
		parent.done()
		return
	}
	s, err := openDirAt(parent.src, name)
	if err != nil {
		t.setErr(err)
		parent.done()
		return
	}
	d, err := openDirAt(parent.dst, name)
	if err != nil {
		s.Close()
		t.setErr(err)
		parent.done()
		return
	}
	j := &dirJob{parent: parent, src: s, dst: d, name: name, rel: rel, finish: func(j *dirJob) {
		j.src.Close()
		j.dst.Close()
	}}
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
	if t.stopped() {
		return
	}
	names, err := readDirNames(j.dst)
	if err != nil {
		t.setErr(err)
		return
	}
	var batches []func()
	for b := range slices.Chunk(names, batch) {
		batches = append(batches, func() {
			for _, name := range b {
				if t.stopped() {
					return
				}
				t.setErr(t.recheckEntry(j, name, missing, mu))
			}
		})
	}
	j.spread(t.pool, batches, perDir)
}

func (t *tree) recheckEntry(j *dirJob, name string, missing map[string]carriedEntry, mu *sync.Mutex) error {
	rel := path.Join(j.rel, name)
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
	sub, err := openDirAt(j.dst, name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil // what was below it is reported as missing
	case err != nil:
		return err
	}
	sj := &dirJob{parent: j, dst: sub, name: name, rel: rel, finish: func(j *dirJob) { j.dst.Close() }}
	j.start()
	sj.start()
	t.pool.add(func() { t.recheckDir(sj, missing, mu) })
	return nil
}

func fstatat(dirfd int, name string, st *unix.Stat_t) error {
	if err := unix.Fstatat(dirfd, name, st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "fstatat", Path: name, Err: err}
	}
	return nil
}

func readlinkat(dirfd int, name string) (string, error) {
	for n := 256; ; n *= 2 {
		buf := make([]byte, n)
		m, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", &os.PathError{Op: "readlinkat", Path: name, Err: err}
		}
		if m < n {
			return string(buf[:m]), nil
		}
	}
}

// sameContent compares the file name in two directories byte by byte: as
// much I/O as a checksum of both, and no collisions.
func sameContent(a, b *os.File, name string) (bool, error) {
	fa, err := openFileAt(a, name)
	if err != nil {
		return false, err
	}
	defer fa.Close()
	fb, err := openFileAt(b, name)
	if err != nil {
		return false, err
	}
	defer fb.Close()
	const chunk = 1 << 20
	ba, bb := make([]byte, chunk), make([]byte, chunk)
	for {
		na, erra := io.ReadFull(fa, ba)
		nb, errb := io.ReadFull(fb, bb)
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

// openFileAt opens the file name in dir for reading, without following a
// symlink.
func openFileAt(dir *os.File, name string) (*os.File, error) {
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: path.Join(dir.Name(), name), Err: err}
	}
	return os.NewFile(uintptr(fd), path.Join(dir.Name(), name)), nil
}

// copyData copies the regular file sf into the new, empty file df,
// keeping its holes: only the data segments (SEEK_DATA, SEEK_HOLE) are
// copied, with copy_file_range(2), and the size is set at the end. A file
// system without SEEK_DATA is copied whole, with io.Copy (which ends in
// copy_file_range too).
func copyData(df, sf *os.File, st *unix.Stat_t) error {
	sfd, dfd := int(sf.Fd()), int(df.Fd())
	if st.Blocks*512 >= st.Size {
		// As many bytes allocated as it has, which blocks preallocated
		// past the end (fallocate KEEP_SIZE) can fake: one SEEK_HOLE
		// tells. A file of at most 4 KiB is copied whole without asking
		// (filled holes cost at most a block).
		whole := st.Size <= 4096
		if !whole {
			hole, err := unix.Seek(sfd, 0, unix.SEEK_HOLE)
			whole = err == nil && hole >= st.Size || err == unix.EINVAL
		}
		if whole {
			off, err := copyRange(df, sf, 0, st.Size)
			if err != nil || off == st.Size {
				return err
			}
			return unix.Ftruncate(dfd, off) // shrank under us
		}
	}
	var off int64
	for {
		data, err := unix.Seek(sfd, off, unix.SEEK_DATA)
		switch {
		case err == unix.ENXIO:
			// No data from off on: the rest, if any, is a hole.
			end, err := unix.Seek(sfd, 0, io.SeekEnd)
			if err != nil {
				return &os.PathError{Op: "lseek", Path: sf.Name(), Err: err}
			}
			if err := unix.Ftruncate(dfd, max(end, off)); err != nil {
				return &os.PathError{Op: "ftruncate", Path: df.Name(), Err: err}
			}
			return nil
		case err == unix.EINVAL && off == 0:
			// SEEK_DATA not supported: copy it all.
			if _, err := unix.Seek(sfd, 0, io.SeekStart); err != nil {
				return &os.PathError{Op: "lseek", Path: sf.Name(), Err: err}
			}
			// No buffer: io.Copy then uses df.ReadFrom, i.e. copy_file_range.
			_, err := io.Copy(df, sf)
			return err
		case err != nil:
			return &os.PathError{Op: "lseek", Path: sf.Name(), Err: err}
		}
		hole, err := unix.Seek(sfd, data, unix.SEEK_HOLE)
		if err != nil {
			return &os.PathError{Op: "lseek", Path: sf.Name(), Err: err}
		}
		if off, err = copyRange(df, sf, data, hole); err != nil {
			return err
		}
		if off < hole {
			// The file shrank under us: end it there (validation
			// compares sizes).
			return unix.Ftruncate(dfd, off)
		}
	}
}

// copyRange copies [from, to) of sf to the same offsets of df, with
// copy_file_range(2), or pread/pwrite where the kernel refuses it. It
// returns where it stopped: before to only at the end of the source.
func copyRange(df, sf *os.File, from, to int64) (int64, error) {
	roff, woff := from, from
	for roff < to {
		n, err := unix.CopyFileRange(int(sf.Fd()), &roff, int(df.Fd()), &woff, int(min(to-roff, 1<<30)), 0)
		switch {
		case err == unix.EXDEV || err == unix.ENOSYS || err == unix.EOPNOTSUPP || err == unix.EINVAL:
			return copyRangeRW(df, sf, roff, to)
		case err != nil:
			return roff, &os.PathError{Op: "copy_file_range", Path: df.Name(), Err: err}
		case n == 0:
			return roff, nil
		}
	}
	return roff, nil
}

func copyRangeRW(df, sf *os.File, off, to int64) (int64, error) {
	buf := make([]byte, min(to-off, 1<<20))
	for off < to {
		n, err := sf.ReadAt(buf[:min(to-off, int64(len(buf)))], off)
		if n > 0 {
			if _, werr := df.WriteAt(buf[:n], off); werr != nil {
				return off, werr
			}
			off += int64(n)
		}
		if err == io.EOF {
			return off, nil
		}
		if err != nil {
			return off, err
		}
	}
	return off, nil
}

// copyXattrs copies the user.* extended attributes of the file sfd to
// dfd. Other namespaces are not ours to copy: security.* and trusted.*
// need privileges and belong to the system, system.* (ACLs) follow the
// mode we set. A file system without extended attributes has none.
func copyXattrs(sfd, dfd int) error {
	names, err := listXattrs(sfd)
	if err != nil {
		return err
	}
	for _, name := range names {
		if !strings.HasPrefix(name, "user.") {
			continue
		}
		val, err := getXattr(sfd, name)
		if err == unix.ENODATA {
			continue // removed meanwhile
		}
		if err != nil {
			return fmt.Errorf("fgetxattr %s: %w", name, err)
		}
		if err := unix.Fsetxattr(dfd, name, val, 0); err != nil {
			return fmt.Errorf("fsetxattr %s: %w", name, err)
		}
	}
	return nil
}

func listXattrs(fd int) ([]string, error) {
	for {
		n, err := unix.Flistxattr(fd, nil)
		if err == unix.ENOTSUP || n == 0 && err == nil {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("flistxattr: %w", err)
		}
		buf := make([]byte, n)
		m, err := unix.Flistxattr(fd, buf)
		if err == unix.ERANGE {
			continue // grew meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("flistxattr: %w", err)
		}
		var names []string
		for _, b := range bytes.Split(buf[:m], []byte{0}) {
			if len(b) > 0 {
				names = append(names, string(b))
			}
		}
		return names, nil
	}
}

func getXattr(fd int, name string) ([]byte, error) {
	for {
		n, err := unix.Fgetxattr(fd, name, nil)
		if err != nil {
			return nil, err
		}
		buf := make([]byte, n)
		m, err := unix.Fgetxattr(fd, name, buf)
		if err == unix.ERANGE {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:m], nil
	}
}
