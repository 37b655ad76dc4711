//go:build unix

package datadir

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
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
	testHookAfterPublish   func(dir string) // after Prepare put its marker in place
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
	// nodeDir is node-N open, dstID the target's identity: the walk checks
	// that the name dst there still leads to dstDir (inPlace).
	nodeDir *nodeDir
	dstID   dirID
	topStat unix.Stat_t // srcDir's, for the target's owner and times
	dstStat unix.Stat_t // dstDir's as the walk starts: the owner of what it makes

	// The permission bits this file system gives a directory made by
	// mkdirat(0700), probed once when a subdirectory shows more
	// (checkFreshSubdir): a fixed directory mode (CIFS dir_mode, vfat
	// dmask) ignores the mode asked for.
	mkdirModeOnce sync.Once
	mkdirMode     uint32
	mkdirModeErr  error

	srcRoot *os.Root // the source, to resolve symlink chains in checkSymlink
	// The target, where validation resolves them: its links are the ones
	// the broker follows, and only this preparation writes it, while a
	// stale holder may swap a source link between two checks.
	dstRoot *os.Root
	// The mount the target lies on: every directory the copy makes in it
	// must lie there too, not on something mounted over it meanwhile.
	dstMount mountID

	pool   *pool // runs the walk's tasks on up to Workers goroutines
	errMu  sync.Mutex
	err    error      // the first error of the walk
	hookMu sync.Mutex // testHookFile is called by one goroutine at a time

	// Copied files with several names in the source, by source inode: the
	// first target name, so that later names become links to it (cp -a).
	copiesMu sync.Mutex
	copies   map[inodeKey]*firstCopy
	held     map[*dirJob]*os.File // target directories firstCopy entries name, duplicated; closed at the end
	// Symlinks with several names in the source, by source inode: later
	// names become links to the first one made (cp -a).
	symlinkNames map[inodeKey]*firstSymlink

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
	ownersLost               atomic.Int64 // entries whose owner could not be kept
	linkRefused              atomic.Int64 // files copied because linking them was not permitted
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
// actSymlink, actLink, actCopy), its type, its inode and, for a link, its
// stamp right after the linkat; for a copy, its source's inode and stamp
// when it was opened for the copy.
type made struct {
	act            action
	typ            uint32
	dev, ino       uint64
	stamp          linkStamp
	srcDev, srcIno uint64 // a copy's source
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
	src      inodeKey // the source inode, as it was copied
	dir      *os.File // nil beyond maxHeld: opened again from dirRel
	dirRel   string
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
	case rel == MarkerName || rel == PreparingName || rel == markerAsideName || rel == removingName || rel == claimName:
		// The target gets its own, and a stale in-progress file in a valid
		// source (a crash just after its marker) means nothing; nor does a
		// claim (a removal that claimed it and crashed before the rename,
		// its preparer having put its marker in place in between).
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
	if t.dstRoot, err = openRootAt(t.node, t.dst, t.dstDir); err != nil {
		return fmt.Errorf("datadir: %w", err)
	}
	defer t.dstRoot.Close()
	if t.dstMount, err = mountOf(int(t.dstDir.Fd()), ""); err != nil {
		return fmt.Errorf("datadir: %w", err)
	}
	t.copies = map[inodeKey]*firstCopy{}
	t.held = map[*dirJob]*os.File{}
	t.symlinkNames = map[inodeKey]*firstSymlink{}
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
	if n := t.linkRefused.Load(); n > 0 {
		t.log.Warn("files copied, not hard-linked: linking them was not permitted (another user's files under fs.protected_hardlinks?)",
			"target", t.dst, "files", n, "uid", os.Geteuid())
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
	if err := unix.Fstat(int(t.srcDir.Fd()), &t.topStat); err != nil {
		return &os.PathError{Op: "fstat", Path: t.srcDir.Name(), Err: err}
	}
	if err := unix.Fstat(int(t.dstDir.Fd()), &t.dstStat); err != nil {
		return &os.PathError{Op: "fstat", Path: t.dstDir.Name(), Err: err}
	}
	t.dstID = dirID{uint64(t.dstStat.Dev), uint64(t.dstStat.Ino)}
	t.err = nil
	t.pool = newPool()
	top := &dirJob{src: t.srcDir, dst: t.dstDir, finish: func(*dirJob) {
		if t.firstErr() == nil {
			if err := t.inPlace(); err != nil {
				t.setErr(err)
				return
			}
			t.setErr(t.finishTop(&t.topStat))
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
				t.log.Info("copying",
					"files_copied", t.filesCopied.Load(), "bytes_copied", t.bytesCopied.Load(),
					"files_linked", t.filesLinked.Load(), "bytes_linked", t.bytesLinked.Load(),
					"elapsed_seconds", logSeconds(time.Since(start)))
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// inPlace checks that node-N/vK still leads to the target the walk writes
// through (targetAt). The walk checks it before each entry it makes and
// before each directory's own owner, mode and times are set.
func (t *tree) inPlace() error {
	if t.nodeDir == nil {
		return nil
	}
	return targetAt(t.nodeDir, t.dst, t.dstID)
}

// errTargetMoved: the target's name no longer leads to the directory
// Prepare writes through (renamed away, out of the data root perhaps).
var errTargetMoved = errors.New("moved or replaced while it was being prepared")

// targetAt checks that name in node (fstatat, no symlink followed) is the
// directory id, and that node-N's name in the data root still leads to
// node (a second fstatat: the descriptor follows node-N when it is moved,
// out of the data root perhaps): ErrValidation (errTargetMoved) if not.
// See docs/datadir.md, "What a tenant who renames our directories can
// cause".
func targetAt(node *nodeDir, name string, id dirID) error {
	var st unix.Stat_t
	err := fstatat(int(node.f.Fd()), name, &st)
	switch {
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return err
	case err != nil || (dirID{uint64(st.Dev), uint64(st.Ino)}) != id:
		return fmt.Errorf("%w: %s: %w", ErrValidation, path.Join(node.f.Name(), name), errTargetMoved)
	}
	switch moved, err := node.moved(); {
	case err != nil:
		return err
	case moved:
		return fmt.Errorf("%w: %s (holding %s): %w", ErrValidation, node.f.Name(), name, errTargetMoved)
	}
	return nil
}
