package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nodeid/nodeid/datadir"
	"github.com/nodeid/nodeid/leasefile"
	"github.com/nodeid/nodeid/nodeid"
)

// A file system that stops answering (EFS or NFS server gone, a stuck
// device) must not hold the lease: every phase on the data root (prepare
// with its GC, the stop sequence's syncfs) is bounded by --fs-timeout. When
// the bound fires, renewals stop without a release (the hung writes may
// still land, so the successor must wait out the lease), health turns
// unhealthy, and the process exits 7 without waiting for the hung call: a
// goroutine blocked in such a syscall cannot be cancelled.

// fsHung is set once a file-system phase hung: /healthz and /readyz answer
// 503 from then on.
var fsHung atomic.Bool

// fsEnd is how the tenure ends on the file system's side, decided once:
// a hang (abandonOnHang, exit 7, no release) or a release (beginRelease).
// Whichever takes it first wins, so a hang declared while the release is
// decided can neither be missed nor follow a release.
var fsEnd atomic.Int32

const (
	fsEndHang    = 1
	fsEndRelease = 2
)

// hangExitGrace bounds what happens between a hang and the exit (stopping
// the renewals, one log line): none of it may keep the process alive. Only
// a loss the provider is still finishing may (exitHung).
const hangExitGrace = 3 * time.Second

// hangExitPause holds the exit after health turned unhealthy, so a test
// can see the 503 (NODEID_TEST_HANG_EXIT_PAUSE); zero in production.
var hangExitPause time.Duration

// defaultFSTimeout is --fs-timeout's default for lease duration l: far
// above a healthy EFS's latency (milliseconds per call, seconds for a
// syncfs of gigabytes), and small enough that the node fails over within
// a minute or two. Safety does not depend on it: the lease is never
// released after a hang, so a successor waits a whole lease from our last
// renewal, which the hang ends.
func defaultFSTimeout(l time.Duration) time.Duration {
	if l == 0 {
		l = nodeid.DefaultLeaseDuration
	}
	return max(4*l, 30*time.Second)
}

// fsBound is the bound of each file-system phase (--fs-timeout).
func (s *settings) fsBound() time.Duration {
	if s.fsTimeout > 0 {
		return s.fsTimeout
	}
	return defaultFSTimeout(s.leaseDuration)
}

// awaitHangExit does not return once a hang was declared (fsHung is set
// before abandonOnHang kills the tree): the command's exit of that kill,
// a loss or a stop must then neither sync, nor release, nor exit with
// another code than abandonOnHang's exitFSHung. It waits on nothing.
func awaitHangExit() {
	if fsHung.Load() {
		select {} // abandonOnHang exits 7 within hangExitGrace
	}
}

// errFSHung is the reason logged when a phase hung.
var errFSHung = errors.New("the file system did not answer in time")

// abandonOnHang ends the process after a hung file-system phase and does
// not return. It stops renewing without a release, marks health unhealthy
// and exits exitFSHung; the hung goroutine is left behind.
func (sess *session) abandonOnHang(phase string, cause error) {
	if !fsEnd.CompareAndSwap(0, fsEndHang) {
		select {} // another phase is already exiting, or the lease is being released
	}
	fsHung.Store(true)
	// Nothing below may delay the exit: not a renewal in flight, not a
	// log writer that blocks.
	time.AfterFunc(hangExitGrace, sess.exitHung)
	// Fence before the hand-off stops the watchdog: a command started
	// from here on (a preparation that returned just now) is killed by
	// fence.started, not left running without a watchdog after our exit.
	sess.fence.kill(nil)
	var inst nodeid.NodeInstance
	p := sess.currentProvider()
	if p != nil {
		inst = p.Instance()
	}
	go sess.abandonLeaseFile(inst)
	if p != nil {
		ctx, cancel := context.WithTimeout(context.Background(), hangExitGrace/2)
		_ = p.LeaveToExpire(ctx) // stops the renewals; writes nothing to S3
		cancel()
	}
	sess.tenureLog(inst).Error("file system hung: lease left to expire, not released; exiting",
		"phase", phase, "data_root", sess.s.dataRoot, "fs_timeout_seconds", sess.s.fsBound().Seconds(), "err", cause, "exit_code", exitFSHung)
	// The log is a queue (logwriter.go): flush it, bounded, or os.Exit
	// drops the line above. The exit timer still fires at hangExitGrace.
	sess.logw.Close(time.Second)
	time.Sleep(hangExitPause)
	sess.exitHung()
}

// exitHung exits with exitFSHung, but not while the provider is finishing
// a loss: the restore of a deleted object's version talks to S3 only, and
// exiting before it ends lets the next holder start from a lower version.
// The kill came first (abandonOnHang, or OnFence on the loss); the wait is
// bounded by L + 2 s.
func (sess *session) exitHung() {
	sess.awaitLossHandled()
	os.Exit(exitFSHung)
}

// abandonLeaseFile rewrites the lease file as `lost` after a hang, and
// keeps every later event from writing it: `nodeid-init health` then fails
// as /healthz does, rather than passing on a `held` deadline until our
// exit. It runs on its own goroutine: the file may sit on the hung file
// system, and the exit timer does not wait for it.
func (sess *session) abandonLeaseFile(inst nodeid.NodeInstance) {
	if sess.leaseFile == "" {
		return
	}
	sess.fileMu.Lock()
	defer sess.fileMu.Unlock()
	sess.abandoned, sess.waiting = true, false
	if err := writeLeaseFile(sess.leaseOut, leasefile.Lease{State: leasefile.StateLost, NodeID: inst.ID, Version: int64(inst.Version), TaskID: sess.cfg.TaskID}); err != nil {
		sess.log.Warn("cannot write the lease file", "path", sess.leaseFile, "err", err)
	}
}

// watchFS probes dir (open and read one entry, which NFS and FUSE cannot
// answer from a cache) while a phase runs, and abandons the process if a
// probe does not return within --fs-timeout: a no-progress watchdog that
// does not need the phase's cooperation. Each probe runs on its own
// goroutine, so a hung one is left behind.
func (sess *session) watchFS(phase, dir string) (stop func()) {
	bound := sess.s.fsBound()
	every := min(bound/4, 2*time.Second)
	done := make(chan struct{})
	go func() {
		for {
			answered := make(chan struct{})
			go func() { probeDir(dir); close(answered) }()
			timer := time.NewTimer(bound)
			select {
			case <-answered:
				timer.Stop()
			case <-done:
				timer.Stop()
				return
			case <-timer.C:
				sess.abandonOnHang(phase, fmt.Errorf("%w: %s did not answer for %v", errFSHung, dir, bound))
			}
			select {
			case <-done:
				return
			case <-time.After(every):
			}
		}
	}()
	return sync.OnceFunc(func() { close(done) })
}

// watchProgress abandons the process if n, a phase's count of steps done
// (datadir.Options.Progress: entries, and chunks of bytes, so a large file
// is progress too), does not move for --fs-timeout: some call of the phase
// did not return.
func (sess *session) watchProgress(phase string, n *atomic.Int64) (stop func()) {
	bound := sess.s.fsBound()
	every := min(bound/4, 2*time.Second)
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		last, since := n.Load(), time.Now()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if v := n.Load(); v != last {
				last, since = v, time.Now()
				continue
			}
			if stalled := time.Since(since); stalled >= bound {
				sess.abandonOnHang(phase, fmt.Errorf("%w: no progress for %v (%d steps done)", errFSHung, stalled.Round(time.Millisecond), last))
			}
		}
	}()
	return sync.OnceFunc(func() { close(done) })
}

func probeDir(dir string) {
	if f, err := os.Open(dir); err == nil {
		_, _ = f.Readdirnames(1)
		f.Close()
	}
}

// boundPrepare starts the watchdog of a preparation; call the function it
// returns with Prepare's error when Prepare returns. A flush that timed out
// inside Prepare (datadir.ErrSyncTimeout, bounded by the same timeout) is a
// hang too: the lease is not given back. So is EINTR: a local file system
// does not return it for these calls, a FUSE or NFS mount does when a call
// waiting on its server is interrupted (Go's preemption signals do that),
// i.e. the server was not answering.
//
// progress is the preparation's datadir.Options.Progress: a second watchdog
// abandons the process when it stands still for --fs-timeout. The probe
// reaches only the data root's file system, while the copy also walks into
// whatever is mounted inside the source (copied as cp -a copies it): a hung
// mount there stops the preparation, and only its progress shows it.
func (sess *session) boundPrepare(progress *atomic.Int64) (prepared func(error)) {
	datadir.SyncTimeout = sess.s.fsBound()
	stopProbe := sess.watchFS("prepare", sess.s.dataRoot)
	stopProgress := sess.watchProgress("prepare", progress)
	return func(err error) {
		stopProbe()
		stopProgress()
		if errors.Is(err, datadir.ErrSyncTimeout) || errors.Is(err, syscall.EINTR) {
			sess.abandonOnHang("prepare", err)
		}
	}
}

// openDataDirBounded opens the data directory dir (openDataDir) within
// --fs-timeout, right after the preparation and before the command starts:
// the stop sequence's syncfs goes through this descriptor. syncfs reports a
// write-back error only to descriptors opened before it was first seen, so
// one opened at stop would miss an error another syncfs (another node's on
// the same EFS mount, or Prepare's) reported first, and release the lease
// over lost writes.
func (sess *session) openDataDirBounded(dir string) (*os.File, error) {
	if dir == "" {
		return nil, nil
	}
	var f *os.File
	err := sess.boundedFS("prepare", "open of "+dir, func() (err error) {
		f, err = openDataDir(dir)
		return err
	})
	return f, err
}

// syncDataBounded is syncData of d, the data directory dir held since the
// start, within --fs-timeout; a syncfs that does not return in time
// abandons the process. dir is then opened again below the data root, as
// the successor will find it, and flushed once more: a directory swapped
// for a symlink meanwhile fails, and a file system that stopped answering
// hangs there even where the syncfs of d returned at once (FUSE without
// SYNCFS, NFS with nothing dirty).
func (sess *session) syncDataBounded(d *os.File, dir string) error {
	if d == nil {
		return nil
	}
	return sess.boundedFS("stop", "syncfs of "+dir, func() error {
		if err := syncData(d); err != nil {
			return err
		}
		f, err := openDataDir(dir)
		if err != nil {
			return err
		}
		defer f.Close()
		return syncData(f)
	})
}

// boundedFS runs fn, a call on the data root, on its own goroutine and
// abandons the process (phase) if it does not return within --fs-timeout.
func (sess *session) boundedFS(phase, what string, fn func() error) error {
	bound := sess.s.fsBound()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		sess.abandonOnHang(phase, fmt.Errorf("%w: %s did not return within %v", errFSHung, what, bound))
		return nil // not reached
	}
}

// boundedCheck runs fn, a start-up check on the data root (stat, access,
// the owner file, the outputs under it; release's scan for the newest
// version), on its own goroutine within --fs-timeout. No lease is held
// yet, so past the bound it returns one error, exit code 7, naming the
// check, and leaves the hung goroutine behind (the process exits).
func (s *settings) boundedCheck(what string, fn func() error) error {
	if s.dataRoot == "" {
		return fn()
	}
	bound := s.fsBound()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		return &codeError{code: exitFSHung, err: fmt.Errorf("data root %s hung at start-up: %w: %s did not return within %v (--fs-timeout); no node ID was taken", s.dataRoot, errFSHung, what, bound)}
	}
}
