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
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/otiai10/copy"
	"golang.org/x/sys/unix"
)

// Test hooks; nil outside tests.
var (
	testHookFile           func(rel string) // before each regular file is copied or linked
	testHookBeforeValidate func(dir string)
)

// tree copies one version directory of a node to another and validates the
// result. All paths are relative to the node directory or to the two
// version directories, opened as os.Root: reads through a symlink that leads
// out of the source fail instead of following it.
type tree struct {
	ctx      context.Context
	cfg      *config
	log      *slog.Logger
	node     *os.Root
	src, dst string // version directory names in node
	dstPath  string // dst as a path, for otiai10/copy

	// The source and target as Prepare inspected and created them; the
	// roots below are checked to be these directories.
	srcDir, dstDir *os.File

	srcRoot, dstRoot *os.Root
	dirs             dirCache // parent directories for linkat

	filesCopied, bytesCopied atomic.Int64
	filesLinked, bytesLinked atomic.Int64
	symlinks, skipped        atomic.Int64
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

func (t *tree) classify(rel string, mode fs.FileMode) action {
	switch {
	case rel == MarkerName || rel == PreparingName:
		// The target gets its own, and a stale in-progress file in a valid
		// source (a crash just after its marker) means nothing.
		return actSkip
	case matchAny(t.cfg.skip, rel):
		return actSkip
	case mode.IsDir():
		return actDir
	case mode&fs.ModeSymlink != 0:
		return actSymlink
	case !mode.IsRegular():
		return actSpecial
	case t.cfg.graceful || matchAny(t.cfg.immutable, rel):
		// Safe to share: nobody writes the source file any more.
		return actLink
	}
	return actCopy
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

	t.dirs.node = t.node
	defer t.dirs.close()
	stop := t.logProgress()
	err = copy.Copy(".", t.dstPath, copy.Options{
		// Reading through the confined root means a symlink swapped in
		// behind our back cannot make us read outside the source.
		FS:   t.srcRoot.FS(),
		Skip: t.skip,
		// Symlinks are recreated by skip after a safety check; should one
		// still reach the library, it must not be followed.
		OnSymlink:     func(string) copy.SymlinkAction { return copy.Skip },
		PreserveTimes: true,
		NumOfWorkers:  int64(t.cfg.workers),
		// CopyBufferSize stays 0: with a buffer the library hides
		// (*os.File).ReadFrom, and io.Copy then loses copy_file_range(2) and
		// moves every byte through user space.
	})
	stop()
	res.FilesCopied, res.BytesCopied = t.filesCopied.Load(), t.bytesCopied.Load()
	res.FilesLinked, res.BytesLinked = t.filesLinked.Load(), t.bytesLinked.Load()
	res.Symlinks, res.Skipped = t.symlinks.Load(), t.skipped.Load()
	if err != nil {
		return fmt.Errorf("datadir: copying %s to %s: %w", t.src, t.dst, err)
	}
	if testHookBeforeValidate != nil {
		testHookBeforeValidate(t.dstPath)
	}
	return t.validate()
}

// skip is the copy.Options.Skip callback, called for every entry before it
// is copied. It does the work the library must not do: leaving entries out,
// hard-linking and recreating symlinks. It returns false only for
// directories and files the library should copy.
func (t *tree) skip(info os.FileInfo, src, dest string) (bool, error) {
	if err := t.ctx.Err(); err != nil {
		return true, err
	}
	rel := filepath.ToSlash(src)
	switch t.classify(rel, info.Mode()) {
	case actSkip:
		t.skipped.Add(1)
		return true, nil
	case actSpecial:
		t.skipped.Add(1)
		t.log.Warn("datadir: leaving out a special file", "path", rel, "type", info.Mode().Type().String())
		return true, nil
	case actDir:
		return false, nil
	case actSymlink:
		target, err := t.srcRoot.Readlink(rel)
		if err != nil {
			return true, err
		}
		if err := checkSymlink(t.srcRoot, rel, target); err != nil {
			return true, err
		}
		if err := t.dstRoot.Symlink(target, rel); err != nil {
			return true, err
		}
		t.symlinks.Add(1)
		return true, nil
	case actLink:
		if testHookFile != nil {
			testHookFile(rel)
		}
		if err := t.link(rel); err != nil {
			return true, err
		}
		t.filesLinked.Add(1)
		t.bytesLinked.Add(info.Size())
		return true, nil
	default: // actCopy
		if testHookFile != nil {
			testHookFile(rel)
		}
		t.filesCopied.Add(1)
		t.bytesCopied.Add(info.Size())
		return false, nil
	}
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
					"filesCopied", t.filesCopied.Load(), "bytesCopied", t.bytesCopied.Load(),
					"filesLinked", t.filesLinked.Load(), "bytesLinked", t.bytesLinked.Load(),
					"elapsed", time.Since(start).Round(time.Millisecond))
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// validate walks the source again and checks that everything that should
// have been carried over is in the target: directories, symlinks with the
// same target, hard links to the same inode, copies with the same size (and
// content, if configured). A source changed by a stale holder after it was
// copied fails validation; the target then gets no marker.
//
// It works on directory descriptors (fstatat, openat without following
// symlinks), a few system calls per file, because with hard links
// validation costs as much as the linking itself.
func (t *tree) validate() error {
	src, err := t.srcRoot.Open(".")
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := t.dstRoot.Open(".")
	if err != nil {
		return err
	}
	defer dst.Close()
	return t.validateDir(src, dst, "")
}

func (t *tree) validateDir(src, dst *os.File, dir string) error {
	entries, err := src.ReadDir(-1)
	if err != nil {
		return err
	}
	sfd, dfd := int(src.Fd()), int(dst.Fd())
	for _, e := range entries {
		if err := t.ctx.Err(); err != nil {
			return err
		}
		name := e.Name()
		rel := path.Join(dir, name)
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: %s: %s", ErrValidation, rel, fmt.Sprintf(format, args...))
		}
		act := t.classify(rel, e.Type())
		if act == actSkip || act == actSpecial {
			continue
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
		if st, dt := ss.Mode&unix.S_IFMT, ds.Mode&unix.S_IFMT; st != dt {
			return bad("file type %#o in the target, %#o in the source", dt, st)
		}
		sameInode := ss.Dev == ds.Dev && ss.Ino == ds.Ino
		switch act {
		case actDir:
			if err := t.validateSubdir(src, dst, name, rel); err != nil {
				return err
			}
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
		case actLink:
			if !sameInode {
				return bad("not a hard link to the source")
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
				same, err := sameContent(t.srcRoot, t.dstRoot, rel)
				if err != nil {
					return err
				}
				if !same {
					return bad("content differs")
				}
			}
		}
	}
	return nil
}

func (t *tree) validateSubdir(src, dst *os.File, name, rel string) error {
	s, err := openDirAt(src, name)
	if err != nil {
		return err
	}
	defer s.Close()
	d, err := openDirAt(dst, name)
	if err != nil {
		return err
	}
	defer d.Close()
	return t.validateDir(s, d, rel)
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

// dirCache keeps a few directories of the node open so that hard-linking a
// file is one linkat(2) between two directory descriptors instead of two
// path walks through os.Root (which opens every component). Paths are
// relative to node and opened through it, so they cannot leave it. Entries
// are reference-counted so that concurrent workers link in parallel and an
// entry is closed only when nobody uses it.
type dirCache struct {
	node *os.Root
	mu   sync.Mutex
	open map[string]*cachedDir
}

type cachedDir struct {
	f       *os.File
	refs    int
	evicted bool
}

const dirCacheSize = 32

func (c *dirCache) get(dir string) (*cachedDir, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d, ok := c.open[dir]; ok {
		d.refs++
		return d, nil
	}
	if c.open == nil {
		c.open = map[string]*cachedDir{}
	}
	if len(c.open) >= dirCacheSize {
		for k, d := range c.open {
			delete(c.open, k)
			d.evicted = true
			if d.refs == 0 {
				d.f.Close()
			}
		}
	}
	f, err := c.node.Open(dir)
	if err != nil {
		return nil, err
	}
	d := &cachedDir{f: f, refs: 1}
	c.open[dir] = d
	return d, nil
}

func (c *dirCache) put(d *cachedDir) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d.refs--; d.refs == 0 && d.evicted {
		d.f.Close()
	}
}

func (c *dirCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, d := range c.open {
		delete(c.open, k)
		d.evicted = true
		if d.refs == 0 {
			d.f.Close()
		}
	}
}

// link hard-links the source file rel into the target. linkat without
// AT_SYMLINK_FOLLOW links a symlink itself, never what it points to.
func (t *tree) link(rel string) error {
	dir, name := path.Split(rel)
	sd, err := t.dirs.get(path.Join(t.src, dir))
	if err != nil {
		return err
	}
	defer t.dirs.put(sd)
	dd, err := t.dirs.get(path.Join(t.dst, dir))
	if err != nil {
		return err
	}
	defer t.dirs.put(dd)
	if err := unix.Linkat(int(sd.f.Fd()), name, int(dd.f.Fd()), name, 0); err != nil {
		return &os.LinkError{Op: "linkat", Old: path.Join(t.src, rel), New: path.Join(t.dst, rel), Err: err}
	}
	return nil
}

// sameContent compares a file in two roots byte by byte: as much I/O as a
// checksum of both, and no collisions.
func sameContent(a, b *os.Root, rel string) (bool, error) {
	fa, err := a.Open(rel)
	if err != nil {
		return false, err
	}
	defer fa.Close()
	fb, err := b.Open(rel)
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
