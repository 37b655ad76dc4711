package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeid/nodeid/nodeid"
)

// cmdRun is the supervisor: acquire, prepare the data directory, run the
// child with its identity in the environment, renew while it runs, and kill
// it the moment the lease is lost.
func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	names := append(append([]string{"stop-timeout", "lease-file", "peers-file", "template"}, leaseOptions...), dataOptions...)
	s, rest, err := parseSettings(ctx, "run", args, stdout, names, nil)
	if err != nil {
		return err
	}
	if len(rest) == 0 {
		return usagef("no command to run: nodeid-init run [flags] -- CMD [ARGS...]")
	}
	bin, err := exec.LookPath(rest[0])
	if err != nil {
		return usagef("command %q: %v", rest[0], errors.Unwrap(err))
	}
	// The default lease file is claimed only once the configuration is
	// checked (claimDefaultLeaseFile): bad input writes nothing to $TMPDIR.
	defaultLease, defaultPeers := s.leaseFile == "", s.peersFile == ""
	leasePath := s.leaseFile
	if defaultLease {
		if err := checkTempDir(); err != nil {
			return err
		}
		if err := s.checkTempDirPlacement(); err != nil {
			return err
		}
		leasePath = defaultLeasePath()
	} else if err := checkWritableFile("lease file", s.leaseFile); err != nil {
		return err
	}
	if defaultPeers {
		s.peersFile = defaultPeersFile(leasePath)
	}
	if !defaultLease || !defaultPeers { // else both go to a directory created later
		if err := checkWritableFile("peers file", s.peersFile); err != nil {
			return err
		}
	}
	outputs := func() []outputFile {
		outs := []outputFile{{"lease file", leasePath}, {"peers file", s.peersFile}}
		for _, t := range s.templates {
			outs = append(outs, outputFile{"template destination", t.dst})
		}
		return outs
	}
	if err := checkDistinctOutputs(outputs()...); err != nil {
		return err
	}
	if s.clusterSize > 0 { // else newSession reports the missing size
		if err := checkTemplates(s.templates, s.clusterSize); err != nil {
			return err
		}
	}

	// Signals: before the child runs they cancel acquisition; afterwards
	// they are forwarded to it.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, stopSignals...)
	defer signal.Stop(sigs)
	passed := notifyPassSignals() // signals.go
	defer signal.Stop(passed)
	ctx, cancel := context.WithCancel(ctx) // the metrics server's lifetime
	defer cancel()
	acqCtx, cancelAcq := context.WithCancel(ctx)
	defer cancelAcq()

	// From here on the outputs are written in their directories as they
	// are now (heldfile.go), never by walking their paths again. The
	// default lease and peers files go to a directory claimed below.
	outs := outputs()
	if defaultLease {
		outs[0].path = ""
	}
	if defaultPeers {
		outs[1].path = ""
	}
	held, err := openOutputs(s, outs...)
	if err != nil {
		return err
	}
	for i, t := range s.templates {
		t.out = held[2+i]
	}
	sess, err := newSession(ctx, s, stderr)
	if err != nil {
		closeHeld(held...)
		return err
	}
	sess.leaseOut, sess.peersOut = held[0], held[1]
	sess.boundOutputs(held[1:]...)
	defer sess.logw.Close(logFlushTimeout)
	defer sess.awaitLossHandled() // on every path, before the log's last flush
	defer sess.closeOutputs()
	go sess.relaySignals(ctx, passed)
	if defaultLease {
		path, cleanup, err := claimDefaultLeaseFile(sess.log, s.dataRoot)
		if err != nil {
			return err
		}
		// After the provider's `lost` write, as closeOutputs; bounded, as
		// every file-system phase: on a hung $TMPDIR the close of lease.lock
		// (a FUSE flush) or an unlink never returns. Abandoned, the process
		// exits and the kernel closes the descriptor.
		defer func() { sess.awaitLossHandled(); sess.boundedCleanup(cleanup) }()
		s.leaseFile, leasePath = path, path
		if defaultPeers {
			s.peersFile = defaultPeersFile(path)
		}
		if err := checkDistinctOutputs(outputs()...); err != nil {
			return err
		}
	}
	sess.leaseFile = s.leaseFile
	if defaultLease {
		if err := sess.setLeaseFile(s.leaseFile); err != nil {
			return err
		}
	}
	if defaultPeers {
		if sess.peersOut, err = openHeldFile("peers file", s.peersFile, s.dataRoot); err != nil {
			return err
		}
		sess.boundOutputs(sess.peersOut)
	}
	defer sess.stopWaiting()
	p := sess.provider

	stopping := make(chan struct{})
	sess.stopRequested = stopping
	watcherDone := make(chan struct{})
	go func() {
		defer close(watcherDone)
		select {
		case <-sigs:
			sess.log.Info("stop requested before the command started")
			close(stopping)
			cancelAcq()
		case <-acqCtx.Done():
		}
	}()
	sess.writeWaiting(acqCtx)
	go sess.hintScaledUp(acqCtx)
	inst, err := p.Acquire(acqCtx)
	sess.setSpare(false)
	if err != nil {
		if isClosed(stopping) {
			return nil
		}
		return err
	}
	invocationOf(ctx).beginTenure()
	// The broker fences itself by the lease file: never start it on a
	// lease it cannot see. Nothing ran, so the lease is given back.
	if err := sess.leaseFileError(); err != nil {
		sess.giveBack(false)
		return fmt.Errorf("the command was not started: cannot write the lease file: %w", err)
	}
	release := func() {
		cctx, ccancel := sess.releaseContext()
		defer ccancel()
		sess.closeProvider(cctx)
	}
	dataDir, err := sess.prepareDataDir(acqCtx, inst)
	if err != nil {
		if errors.Is(err, nodeid.ErrLeaseLost) {
			return err
		}
		sess.giveBack(false)
		if isClosed(stopping) {
			return nil
		}
		return err
	}
	dataFile, err := sess.openDataDirBounded(dataDir)
	if err != nil {
		// Prepared, and nothing ran on it: release.
		sess.giveBack(true)
		return fmt.Errorf("the command was not started: %w", err)
	}
	if dataFile != nil {
		defer dataFile.Close()
	}
	peers, err := sess.beforeStart(acqCtx, inst, dataDir)
	if err != nil {
		if errors.Is(err, nodeid.ErrLeaseLost) {
			return err
		}
		// Nothing ran on the prepared directory: release.
		sess.giveBack(true)
		if isClosed(stopping) {
			return nil
		}
		return err
	}
	if testHooks.beforeStart != nil {
		testHooks.beforeStart()
	}
	// Decide to start only once the watcher is gone: a signal it took
	// after any earlier check would otherwise be lost and the command
	// started anyway. A signal from now on waits in sigs and is forwarded
	// to the command as soon as it runs.
	cancelAcq()
	<-watcherDone
	if isClosed(stopping) {
		sess.giveBack(true)
		return nil
	}
	if lerr := sess.lossErr(); lerr != nil {
		// The tenure ended like a loss before the start (the lease file
		// failed twice, then a write worked again): no command, no release.
		return &codeError{code: exitLeaseLost, err: fmt.Errorf("the command was not started: %w", lerr)}
	}
	if err := sess.leaseFileError(); err != nil {
		sess.giveBack(true)
		return fmt.Errorf("the command was not started: cannot write the lease file: %w", err)
	}
	go sess.followPeers(ctx, s.peersFile, peers)

	// As a subreaper, run inherits whatever the command orphans, so it can
	// kill and reap all of it before a release (see stop_linux.go).
	if err := becomeSubreaper(); err != nil {
		sess.log.Warn("cannot become a child subreaper; processes that leave the command's process group are not tracked", "err", err)
	}
	if !procIsOurs() {
		sess.log.Warn("/proc is not this PID namespace's: the processes the command leaves cannot be found, so its lease will be left to expire instead of released", "err", errForeignProc)
	}
	// PDEATHSIG reaches the command only; the rest of its tree dies with
	// nodeid-init only when the kernel tears down the PID namespace.
	if !diesWithItsTree() {
		sess.log.Warn("not PID 1 of a PID namespace: if nodeid-init is SIGKILLed (OOM killer, kill -9), processes the command started may keep writing after the lease expires",
			"pid", os.Getpid(), "fix", "make `nodeid-init run` the container's entrypoint, without pidMode task or host (docs/ecs.md)")
	}

	// Pdeathsig kills the child if this process dies, even by SIGKILL; it
	// is tied to the OS thread that forks, so keep this goroutine on it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	child := exec.Command(bin, rest[1:]...)
	child.Args[0] = rest[0]
	child.Env = append(append(inheritedEnv(dataDir), sess.nodeEnv(inst, dataDir)...), "NODE_PEERS="+nodePeersEnv(peers), "NODE_PEERS_FILE="+s.peersFile)
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, stdout, stderr
	// A session of its own, not just a group (review r26i): groups are
	// joined only within a session, so nothing the command starts can hide
	// in nodeid-init's group, and the command itself, a session leader,
	// cannot move to another group. pgid = sid = pid.
	child.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}

	// A loss kills everything the command started at once: its data must
	// not be touched once the ID may be someone else's. The group alone is
	// not enough: the leader itself may have moved to another group.
	started := make(chan struct{})
	sess.whenLost(func(error) {
		<-started
		// Through the fence, which forgets the pgid once the tree is reaped
		// (fence.stopped): the pid may be another process's by then.
		sess.fence.kill(nil)
	})
	if !p.Valid() {
		// Past the deadline before the watchdog said so: a loss all the same.
		close(started)
		if err := p.Err(); err != nil {
			return err
		}
		inst := p.Instance()
		return &nodeid.LostError{Instance: inst, Reason: "self-fence deadline passed before the command started"}
	}
	err = noNewPrivs()
	if err == nil {
		err = child.Start()
	}
	if err == nil {
		sess.fence.started(child.Process) // first: a loss from now on kills it
	}
	close(started)
	if err != nil {
		release()
		return fmt.Errorf("start %s: %w", rest[0], err)
	}
	pid := child.Process.Pid
	tlog := sess.tenureLog(inst)
	tlog.Info("command started", "pid", pid, "command", rest[0])
	stopReaping := reapOrphans(pid)
	exited := make(chan struct{})
	var werr error
	go func() { werr = child.Wait(); close(exited) }()

	// stopRest kills and reaps everything the command started, the leader
	// included (exec.Cmd.Wait reaps it), once and within groupExitTimeout:
	// a process that survives SIGKILL that long is stuck in the kernel, and
	// waiting longer would not make its writes safe. The group stays pgid =
	// pid after the leader is reaped.
	stopRest := sync.OnceValue(func() error {
		stopReaping()
		start := time.Now()
		_ = child.Process.Kill() // by pidfd: it may have left its group, /proc may be foreign
		n, err := killLeftovers(pid, groupExitTimeout)
		if err == nil {
			select {
			case <-exited:
			case <-time.After(max(groupExitTimeout-time.Since(start), time.Second)):
				err = fmt.Errorf("the command (pid %d) is dead but was not reaped within %v", pid, groupExitTimeout)
			}
		}
		if err == nil {
			sess.fence.stopped()
			tlog.Info("processes of the command gone", "killed", n, "took_seconds", logSeconds(time.Since(start)))
		}
		return err
	})
	lost := func(lerr error) error {
		awaitHangExit()
		if err := stopRest(); err != nil {
			tlog.Error("exiting although processes of the command may still run", "err", err)
		}
		sess.awaitLossHandled()
		tlog.Error("command killed: lease lost")
		return sess.lossExit(lerr)
	}

	var forwarded syscall.Signal
	var killTimer <-chan time.Time
	for {
		select {
		case lerr := <-sess.lost:
			// Not waiting for the leader alone: stopRest bounds every wait.
			return lost(lerr)
		case sig := <-sigs:
			if forwarded != 0 {
				continue
			}
			forwarded = sig.(syscall.Signal)
			sess.log.Info("forwarding signal to the command", "signal", sig.String(), "stop_timeout_seconds", s.stopTimeout.Seconds())
			signalCommand(pid, forwarded)
			killTimer = time.After(s.stopTimeout)
		case <-killTimer:
			sess.log.Warn("command did not stop in time, killing it", "stop_timeout_seconds", s.stopTimeout.Seconds())
			_ = child.Process.Kill() // by pidfd: it may have left its group
			killTree(pid)
			killTimer = nil
		case <-exited:
			// A hang kills the tree before this runs: its exit is abandonOnHang's.
			awaitHangExit()
			code := childExitCode(werr)
			if forwarded != 0 && code == 128+int(forwarded) {
				code = 0 // it died of the signal we forwarded: a clean stop
			}
			if lerr := sess.lossErr(); lerr != nil {
				// The broker saw the loss in the lease file and stopped just
				// before our SIGKILL reached it, or the SIGKILL of a fence
				// (lease file not writable) reached it before sess.lost.
				return lost(lerr)
			}
			level := slog.LevelInfo
			if code != 0 {
				level = slog.LevelWarn // it failed: not a clean stop
			}
			tlog.Log(ctx, level, "command exited", "exit_code", childExitCode(werr), "after_signal", forwarded != 0)
			// A release lets the successor hard-link our files: first make
			// sure nothing of ours writes them any more and they are durable.
			err := stopRest()
			awaitHangExit() // a hung output write declared during stopRest
			if err == nil {
				err = sess.syncDataBounded(dataFile, dataDir)
			}
			awaitHangExit()
			if lerr := sess.lossErr(); lerr != nil {
				return lost(lerr)
			}
			if err != nil {
				// The successor then copies instead of hard-linking.
				cctx, ccancel := context.WithTimeout(context.Background(), minReleaseTimeout)
				if herr := p.LeaveToExpire(cctx); herr != nil {
					err = errors.Join(err, herr)
				}
				ccancel()
				tlog.Warn("lease left to expire, not released", "err", err)
				if code == 0 {
					code = exitError
				}
				return &codeError{code: code}
			}
			release()
			tlog.Log(ctx, level, "command exited, lease released", "exit_code", childExitCode(werr), "after_signal", forwarded != 0)
			if code != 0 {
				return &codeError{code: code}
			}
			return nil
		}
	}
}

// beforeStart reads the peers table, renders the templates and writes the
// peers file, in that order, so the child starts with files that agree.
func (sess *session) beforeStart(ctx context.Context, inst nodeid.NodeInstance, dataDir string) ([]nodeid.Peer, error) {
	peers, err := sess.readPeers(ctx, inst)
	if err != nil {
		return nil, err
	}
	data := templateData{NodeID: inst.ID, Version: int64(inst.Version), DataDir: dataDir, ClusterSize: sess.cfg.ClusterSize,
		TaskID: sess.cfg.TaskID, Address: sess.cfg.Address, Peers: peers}
	out, err := renderTemplates(sess.s.templates, data, nil)
	if err != nil {
		return nil, err
	}
	sess.tmplData, sess.tmplOut = &data, out
	for _, t := range sess.s.templates {
		sess.log.Info("template rendered", "src", t.src, "dst", t.dst)
	}
	if err := sess.peersOut.writeFile(peersJSON(peers), 0o644); err != nil {
		return nil, fmt.Errorf("peers file: %w", err)
	}
	sess.log.Info("peers file written", "path", sess.s.peersFile, "peers", nodePeersEnv(peers))
	return peers, nil
}

func childExitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return exitError
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// logSeconds is d as a number of seconds to the millisecond, for log fields
// named *_seconds (1.519, not 1.5190000000000001).
func logSeconds(d time.Duration) float64 {
	return float64(d.Round(time.Millisecond).Milliseconds()) / 1000
}

// noNewPrivs sets no_new_privs on this (locked) thread, which the command
// inherits when it is forked from it, unless nodeid-init is root: an
// unprivileged nodeid-init cannot SIGKILL a process that a setuid binary or
// file capabilities raised above it (review r26i), so none may be raised.
func noNewPrivs() error {
	if os.Geteuid() == 0 {
		return nil
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	return nil
}
