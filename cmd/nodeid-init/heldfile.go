package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nodeid/nodeid/leasefile"
)

// heldFile is a file the supervisor replaces during the tenure: the lease
// file, the peers file, a rendered template (also the env file and the
// hand-off, written after a wait for an ID). Outside the data root its
// directory is resolved once, at start, by the path the operator configured,
// and held open (os.Root): every replacement is made inside that directory,
// never by walking the path again. Under the data root (judged by identity,
// underDataRoot) what is there is not the operator's (another tenant, a
// previous task's broker): each write opens the directory again from the
// data root, one component at a time, following no symlink and refusing a
// node-N directory (openInside), so a directory renamed away is no longer
// reached and a symlink swapped in is refused.
type heldFile struct {
	path string   // as configured: for logs and errors
	dir  *os.Root // the held directory (outside the data root), else nil
	// root and rel: the data root, and the directory relative to it, for
	// an output under the data root.
	root *os.Root
	rel  string
	name string
	tmp  string // prefix of the temporary files, as leasefile names them
	// bound, when set, runs each writeFile within --fs-timeout
	// (session.boundOutputs): a hung output must not hold the ID.
	bound func(what string, fn func() error) error
}

// errNotRegularOutput is a destination that became a symlink, a directory
// or another non-regular file since start: it is not replaced.
var errNotRegularOutput = errors.New("is no longer a regular file: not replaced")

// openHeldFile opens path's directory: held as configured (symlinks
// included: that is the operator's), or, under the data root (dataRoot, ""
// for none), checked to be reachable inside it at start: a symlink there
// or a node-N directory on the way is refused, a configuration error.
func openHeldFile(what, path, dataRoot string) (*heldFile, error) {
	h := &heldFile{path: path, name: filepath.Base(path), tmp: "." + filepath.Base(path) + "."}
	dir := filepath.Dir(path)
	root, rel, err := underDataRoot(dir, dataRoot)
	if err == nil && root != nil {
		h.root, h.rel = root, rel
		var d *os.Root
		if d, err = openInside(root, rel); err == nil {
			d.Close()
		} else {
			root.Close()
			err = fmt.Errorf("%w (it lies under the data root %s, where no symlink is followed and no node-N directory written)", unwrapPath(err), dataRoot)
		}
	} else if err == nil {
		h.dir, err = os.OpenRoot(dir)
	}
	if err != nil {
		return nil, usagef("%s %s: cannot open its directory: %v", what, path, unwrapPath(err))
	}
	return h, nil
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// close releases the directory; nil-safe. It does not wait for a write in
// flight (os.Root.Close does not).
func (h *heldFile) close() {
	if h != nil {
		if h.dir != nil {
			_ = h.dir.Close()
		}
		if h.root != nil {
			_ = h.root.Close()
		}
	}
}

// openDir is the directory of the next write: the held one, or the one
// the path names inside the data root now (close it after the write).
func (h *heldFile) openDir() (*os.Root, func(), error) {
	if h.dir != nil {
		return h.dir, func() {}, nil
	}
	d, err := openInside(h.root, h.rel)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: its directory under the data root: %w", h.path, err)
	}
	return d, func() { d.Close() }, nil
}

// replace replaces the file atomically with data and mode, as
// leasefile.WriteFile does (temporary file created with O_EXCL, written,
// chmod, fsync if durable, rename), all relative to the held directory.
// A final name that is not a regular file (a symlink planted there) is
// refused: rename would replace the link, but nobody configured one.
func (h *heldFile) replace(data []byte, mode os.FileMode, durable bool) error {
	dir, done, err := h.openDir()
	if err != nil {
		return err
	}
	defer done()
	if fi, err := dir.Lstat(h.name); err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("%s %w", h.path, errNotRegularOutput)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	var f *os.File
	var tmp string
	for range 10 {
		tmp = h.tmp + randomSuffix()
		f, err = dir.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return err
	}
	renamed := false
	defer func() {
		if !renamed {
			_ = dir.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if durable {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := dir.Rename(tmp, h.name); err != nil {
		return err
	}
	renamed = true
	return nil
}

// writeFile is leasefile.WriteFile into the held directory: synced before
// the rename.
func (h *heldFile) writeFile(data []byte, mode os.FileMode) error {
	if h.bound != nil {
		return h.bound("write of "+h.path, func() error { return h.replace(data, mode, true) })
	}
	return h.replace(data, mode, true)
}

// boundedOutput is boundedFS for an output write, which a stop request
// (stopRequested: SIGTERM before the command started) also ends: the
// write is given one more second, then abandoned as a hang (exit 7, no
// release), so a hung output cannot make the task ignore its stop for
// up to --fs-timeout.
func (sess *session) boundedOutput(what string, fn func() error) error {
	bound := sess.s.fsBound()
	w, err := sess.writes.begin(what, bound)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() {
		err := fn()
		sess.writes.end(w)
		done <- err
	}()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	cause := fmt.Errorf("%w: %s did not return within %v", errFSHung, what, bound)
	select {
	case err := <-done:
		return err
	case <-timer.C:
	case <-sess.stopRequested:
		select {
		case err := <-done:
			return err
		case <-time.After(time.Second):
		}
		cause = fmt.Errorf("%w: %s had not returned when the stop was requested", errFSHung, what)
	}
	sess.abandonOnHang("output", cause)
	return nil // not reached
}

// boundOutputs bounds every later writeFile of hs (nil entries skipped) by
// --fs-timeout, on its own goroutine, as a phase on the data root is: a
// file system that stops answering (an fsync that never returns) would
// otherwise hold the node ID with the command never started, or the
// supervisor stuck in a re-rendering. Past the bound the process abandons
// the lease and exits 7 (abandonOnHang). The lease file is not bound here:
// a hung lease-file write ends the tenure through the self-fence deadline.
func (sess *session) boundOutputs(hs ...*heldFile) {
	for _, h := range hs {
		if h != nil {
			h.bound = sess.boundedOutput
		}
	}
}

// writeLease is leasefile.Write into the held directory: the same bytes
// and temporary names, not synced (it is rewritten at every renewal).
func (h *heldFile) writeLease(l leasefile.Lease) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	if err := h.replace(append(b, '\n'), 0o644, false); err != nil {
		return fmt.Errorf("lease file: %w", err)
	}
	return nil
}

// openLeaseFile is openHeldFile for a lease file: its temporary files are
// named as leasefile.Write names them (.lease-*), which the cleanup of a
// private default directory removes.
func openLeaseFile(path, dataRoot string) (*heldFile, error) {
	h, err := openHeldFile("lease file", path, dataRoot)
	if err == nil {
		h.tmp = ".lease-"
	}
	return h, err
}

func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// openOutputs opens the held files of a command at its start, before its
// session: a refusal (openHeldFile) is then bad input, one error line with
// nothing logged, acquired or written before it. A path "" is not opened
// (its entry stays nil). The data root is checked first: the outputs under
// it are opened from it.
func openOutputs(s *settings, outs ...outputFile) ([]*heldFile, error) {
	if err := s.checkDataRoot(); err != nil {
		return nil, err
	}
	held := make([]*heldFile, len(outs))
	for i, o := range outs {
		if o.path == "" {
			continue
		}
		open := openHeldFile
		if o.what == "lease file" {
			open = func(_, path, dataRoot string) (*heldFile, error) { return openLeaseFile(path, dataRoot) }
		}
		var h *heldFile
		err := s.boundedCheck("open of "+o.path, func() (err error) {
			h, err = open(o.what, o.path, s.dataRoot)
			return err
		})
		if err != nil {
			closeHeld(held...)
			return nil, err
		}
		held[i] = h
	}
	return held, nil
}

// closeHeld closes every held file given; nil entries are skipped.
func closeHeld(hs ...*heldFile) {
	for _, h := range hs {
		h.close()
	}
}

// setLeaseFile makes path (or none, "") the lease file this session
// writes, its directory held from now on.
func (sess *session) setLeaseFile(path string) error {
	sess.leaseFile = path
	if path == "" {
		return nil
	}
	h, err := openLeaseFile(path, sess.s.dataRoot)
	if err != nil {
		return err
	}
	sess.leaseOut = h
	return nil
}

// closeOutputs releases the held directories once a loss, if any, has been
// handled: the provider writes `lost` to the lease file after the kill and
// its restore (awaitLossHandled), and a directory closed before would leave
// the file saying `held` until its deadline, `health` passing meanwhile.
// Never on the way to a kill: it runs when the command returns.
func (sess *session) closeOutputs() {
	sess.awaitLossHandled()
	sess.leaseOut.close()
	sess.peersOut.close()
	for _, t := range sess.s.templates {
		t.out.close()
	}
}

// outputWrites are the output writes in flight (boundedOutput), each with
// the deadline of its --fs-timeout bound. beginRelease closes the set: a
// write that has not begun by then is refused, as the lease is being given
// back.
type outputWrites struct {
	mu       sync.Mutex
	closed   bool
	inflight map[*outputWrite]struct{}
}

type outputWrite struct {
	what     string
	deadline time.Time
	done     chan struct{}
}

// errReleasing refuses an output write that would begin after the
// release was decided.
var errReleasing = errors.New("the lease is being released: no more output writes")

func (ws *outputWrites) begin(what string, bound time.Duration) (*outputWrite, error) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.closed {
		return nil, errReleasing
	}
	if ws.inflight == nil {
		ws.inflight = make(map[*outputWrite]struct{})
	}
	w := &outputWrite{what: what, deadline: time.Now().Add(bound), done: make(chan struct{})}
	ws.inflight[w] = struct{}{}
	return w, nil
}

func (ws *outputWrites) end(w *outputWrite) {
	ws.mu.Lock()
	delete(ws.inflight, w)
	ws.mu.Unlock()
	close(w.done)
}

// close refuses later writes and returns those in flight.
func (ws *outputWrites) close() []*outputWrite {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.closed = true
	out := make([]*outputWrite, 0, len(ws.inflight))
	for w := range ws.inflight {
		out = append(out, w)
	}
	return out
}

// beginRelease decides that the lease is released, and does not return
// when it is not to be: after a hang (awaitHangExit), or when an output
// write in flight does not finish within what is left of its --fs-timeout
// bound (a hang: abandonOnHang, exit 7). A write landing after the release
// could overwrite what the successor wrote. The decision and a hang's
// exclude each other (fsEnd).
func (sess *session) beginRelease() {
	awaitHangExit()
	for _, w := range sess.writes.close() {
		t := time.NewTimer(time.Until(w.deadline))
		select {
		case <-w.done:
			t.Stop()
		case <-t.C:
			sess.abandonOnHang("output", fmt.Errorf("%w: %s had not returned when the lease was to be released", errFSHung, w.what))
		}
	}
	if !fsEnd.CompareAndSwap(0, fsEndRelease) && fsEnd.Load() != fsEndRelease {
		select {} // a hang was declared: abandonOnHang exits 7
	}
}
