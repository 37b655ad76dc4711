package main

import (
	"context"
	"fmt"
	"time"

	"github.com/nodeid/nodeid/clock"
	"github.com/nodeid/nodeid/leasefile"
	"github.com/nodeid/nodeid/nodeid"
)

// handleEvent is the provider's OnEvent: it feeds the metrics and keeps the
// lease file current, and ends the tenure like a loss when the file cannot
// be written twice in a row.
func (sess *session) handleEvent(e nodeid.Event) {
	sess.metrics.observe(e)
	switch e.Kind {
	case nodeid.EventRenewalFailed:
		sess.mu.Lock()
		sess.renewFails++
		sess.mu.Unlock()
	case nodeid.EventRenewed:
		sess.mu.Lock()
		n := sess.renewFails
		sess.renewFails = 0
		sess.mu.Unlock()
		if n > 0 {
			sess.tenureLog(e.Instance).Info("renewals recovered", "failed_attempts", n)
		}
	}
	if sess.leaseFile == "" {
		return
	}
	l := leasefile.Lease{NodeID: e.Instance.ID, Version: int64(e.Instance.Version), TaskID: sess.cfg.TaskID}
	switch e.Kind {
	case nodeid.EventAcquired, nodeid.EventRenewed:
		l.State = leasefile.StateHeld
		l.ValidUntilBoottimeNs = int64(clock.SystemBoottime() + e.Deadline.Sub(sess.cfg.Clock.Now()))
	case nodeid.EventLost:
		l.State = leasefile.StateLost
	case nodeid.EventReleased:
		l.State = leasefile.StateReleased
	default:
		return
	}
	sess.fileMu.Lock()
	if sess.abandoned {
		sess.fileMu.Unlock()
		return // the file says `lost` after a hang, and stays so
	}
	sess.waiting = false
	err := writeLeaseFile(sess.leaseOut, l)
	sess.fileMu.Unlock()
	sess.mu.Lock()
	sess.leaseFileErr = err
	fails := 0
	if err != nil {
		sess.leaseFileFails++
		fails = sess.leaseFileFails
	} else {
		sess.leaseFileFails = 0
	}
	sess.mu.Unlock()
	if err == nil {
		return
	}
	sess.metrics.leaseFileFailures.Inc()
	sess.log.Error("cannot update the lease file; /healthz fails until it can", "path", sess.leaseFile, "failed_writes_in_a_row", fails, "err", err)
	if l.State == leasefile.StateHeld && fails >= 2 {
		// The broker reads a deadline that is no longer extended: it stops
		// writing when it passes, while we would keep the lease. End the
		// tenure like a loss instead, so the ID fails over.
		ferr := &nodeid.LostError{Instance: e.Instance, Err: err,
			Reason: fmt.Sprintf("the lease file could not be written %d times in a row", fails)}
		sess.mu.Lock()
		first := sess.fenced == nil
		if first {
			sess.fenced = ferr
		}
		sess.mu.Unlock()
		if first {
			go sess.handleLost(ferr)
		}
	}
}

// writeLeaseFile is leasefile.Write, into the lease file's held directory,
// with this host's boot ID, or the failure a test asked for (testHooks).
func writeLeaseFile(h *heldFile, l leasefile.Lease) error {
	if testHooks.leaseFileFault != nil {
		if err := testHooks.leaseFileFault(); err != nil {
			return err
		}
	}
	l.BootID = leasefile.BootID()
	return h.writeLease(l)
}

// healthy is /healthz. It follows the rule of `nodeid-init health` on the
// lease file this session writes, so that an HTTP health check and the
// command health check never disagree: healthy while the task holds a
// valid lease (the file says `held` until its deadline) or waits for a
// node ID (a hot spare: `waiting`, refreshed); not once the lease is lost
// or released, a file-system phase hung (the file then says `lost`), the
// task stopped waiting (`stopped`), or the last lease-file write failed
// (the file no longer says what this task knows).
func (sess *session) healthy() bool {
	if fsHung.Load() || !sess.leaseFileOK() {
		return false
	}
	if sess.spare.Load() {
		return true
	}
	p := sess.currentProvider()
	return p != nil && p.Valid()
}

// ready is /readyz: a valid lease and ready (readiness timeout or peers);
// a spare is healthy but never ready.
func (sess *session) ready() bool {
	p := sess.currentProvider()
	return p != nil && p.Ready() && !fsHung.Load()
}

// leaseFileOK reports whether the last lease-file write, if any, succeeded.
func (sess *session) leaseFileOK() bool {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return sess.leaseFileErr == nil
}

// leaseFileError is the error of the last lease-file write.
func (sess *session) leaseFileError() error {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return sess.leaseFileErr
}

// writeWaiting publishes that this task waits for a node ID (a hot spare):
// `health` passes, a broker finds no valid lease. The state stands for two
// poll intervals and is refreshed every poll interval until the first event
// is written or ctx ends, so the file of a task that died while waiting
// goes stale by itself; stopWaiting says `stopped` on the way out.
func (sess *session) writeWaiting(ctx context.Context) {
	sess.setSpare(true)
	if sess.leaseFile == "" {
		return
	}
	sess.fileMu.Lock()
	sess.waiting = true
	err := sess.writeWaitingLocked()
	sess.fileMu.Unlock()
	if err != nil {
		sess.log.Warn("cannot write the lease file", "path", sess.leaseFile, "err", err)
	}
	go func() {
		t := time.NewTicker(sess.cfg.PollInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			sess.fileMu.Lock()
			still := sess.waiting
			if still {
				err = sess.writeWaitingLocked()
			}
			sess.fileMu.Unlock()
			if !still {
				return
			}
			if err != nil {
				sess.log.Warn("cannot write the lease file", "path", sess.leaseFile, "err", err)
			}
		}
	}()
}

// writeWaitingLocked writes the `waiting` state and records the outcome:
// a spare whose file cannot be refreshed fails `health` once it goes
// stale, so it fails /healthz too.
func (sess *session) writeWaitingLocked() error {
	err := writeLeaseFile(sess.leaseOut, leasefile.Lease{State: leasefile.StateWaiting, NodeID: -1, TaskID: sess.cfg.TaskID,
		ValidUntilBoottimeNs: int64(clock.SystemBoottime() + 2*sess.cfg.PollInterval)})
	sess.mu.Lock()
	sess.leaseFileErr = err
	sess.mu.Unlock()
	return err
}

// setSpare records whether the task waits for a node ID: the metric
// nodeid_waiting and /healthz.
func (sess *session) setSpare(waiting bool) {
	sess.spare.Store(waiting)
	if waiting {
		sess.metrics.waiting.Set(1)
	} else {
		sess.metrics.waiting.Set(0)
	}
}

// stopWaiting, on the way out of a task that never acquired, replaces a
// `waiting` lease file with `stopped`, so `health` fails at once.
// It waits at most --fs-timeout: a lease file on a file system that hangs
// holds fileMu, and the way out must not wait for it. After a loss it
// does nothing: a loss needs a tenure, the file is the provider's `lost`,
// and the exit is bounded by the loss's one deadline (awaitLossHandled).
func (sess *session) stopWaiting() {
	sess.setSpare(false)
	if sess.fence.fenced.Load() {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sess.fileMu.Lock()
		defer sess.fileMu.Unlock()
		if !sess.waiting {
			return
		}
		sess.waiting = false
		if err := writeLeaseFile(sess.leaseOut, leasefile.Lease{State: leasefile.StateStopped, NodeID: -1, TaskID: sess.cfg.TaskID}); err != nil {
			sess.log.Warn("cannot write the lease file", "path", sess.leaseFile, "err", err)
		}
	}()
	select {
	case <-done:
	case <-time.After(sess.s.fsBound()):
		sess.log.Warn("lease file not written: its file system did not answer", "path", sess.leaseFile, "fs_timeout_seconds", sess.s.fsBound().Seconds())
	}
}
