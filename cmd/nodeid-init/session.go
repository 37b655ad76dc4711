package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeid/nodeid/clock"
	"github.com/nodeid/nodeid/datadir"
	"github.com/nodeid/nodeid/leasefile"
	"github.com/nodeid/nodeid/nodeid"
)

// session is what run, acquire and renew share: the checked configuration,
// the repository, the provider and the side channels fed by its events (the
// lease file and the metrics).
type session struct {
	s         *settings
	cfg       nodeid.Config
	log       *slog.Logger
	repo      *nodeid.S3Repository
	provider  *nodeid.Provider
	metrics   *metrics
	leaseFile string

	// dataRefused is set when the data root refused this lease's version
	// (see dataRefusal): the lease must then expire, not be released.
	dataRefused bool

	mu     sync.Mutex
	onLost []func(error) // run before the loss is reported, e.g. kill the child
	lost   chan error

	// leaseFileErr is the error of the last lease-file write (nil after a
	// success); leaseFileFails counts failed writes in a row. fenced is set
	// when they ended the tenure (see handleEvent).
	leaseFileErr   error
	leaseFileFails int
	fenced         error
	// renewFails counts failed renewal attempts since the last success,
	// for the "renewals recovered" line.
	renewFails int

	// fileMu orders the writes of the lease file; waiting is set while the
	// file says `waiting` and keepWaiting refreshes it: the first event
	// written (acquired, ...) or stopWaiting ends it.
	fileMu  sync.Mutex
	waiting bool
}

// leaseOptions are the settings of commands that take a lease.
var leaseOptions = append([]string{"cluster-size", "lease-duration", "renew-interval", "acquire-timeout", "poll-interval",
	"readiness-timeout", "allowed-ids", "task-id", "metrics-addr", "skip-probe", "advertise-address"}, s3Options...)

var dataOptions = []string{"data-root", "keep-versions", "data-workers", "immutable", "skip", "data-preset"}

// newSession validates what is left to validate, then connects: nothing
// is written to S3 or the data root before this returns.
func newSession(ctx context.Context, s *settings, stderr io.Writer) (*session, error) {
	if err := s.requireBucket(); err != nil {
		return nil, err
	}
	if err := s.requireClusterSize(); err != nil {
		return nil, err
	}
	if err := s.checkDataRoot(); err != nil {
		return nil, err
	}
	log := s.logger(stderr)
	cfg, err := s.providerConfig(log)
	if err != nil {
		return nil, err
	}
	sess := &session{s: s, cfg: cfg, log: log, metrics: newMetrics(), lost: make(chan error, 1)}
	sess.metrics.clusterSize.Set(float64(cfg.ClusterSize))
	if s.metricsAddr != "" {
		if err := serveHealth(ctx, s.metricsAddr, sess.metrics, sess.currentProvider, sess.leaseFileOK, log); err != nil {
			return nil, err
		}
	}
	if cfg.TaskID, err = resolveTaskID(ctx, s, log); err != nil {
		return nil, err
	}
	sess.log = log.With("task_id", cfg.TaskID)
	cfg.Logger = log
	if sess.repo, err = s.repository(ctx, log); err != nil {
		return nil, err
	}
	if err := s.probe(ctx, sess.repo, sess.log); err != nil {
		return nil, err
	}
	// After the probe, so that bad input still gets one line on stderr.
	var source string
	if cfg.Address, source = resolveAddress(ctx, s, defaultAddressSources(), sess.log); cfg.Address != "" {
		sess.log.Info("advertised address", "address", cfg.Address, "source", source)
	}
	if off := os.Getenv("NODEID_TEST_CLOCK_OFFSET"); off != "" {
		// Test-only: shift this task's wall clock (chaos experiment 9). The
		// protocol must not care; durations stay monotonic.
		d, err := time.ParseDuration(off)
		if err != nil {
			return nil, usagef("invalid NODEID_TEST_CLOCK_OFFSET %q: %v", off, err)
		}
		cfg.Clock = clock.WithOffset(clock.Real(), d)
		sess.log.Warn("test setting: wall clock offset", "offset", d)
	}
	cfg.OnLost = sess.handleLost
	cfg.OnEvent = sess.handleEvent
	p, err := nodeid.NewProvider(sess.repo, cfg)
	if err != nil {
		return nil, err
	}
	sess.mu.Lock()
	sess.cfg, sess.provider = cfg, p
	sess.mu.Unlock()
	return sess, nil
}

func (sess *session) currentProvider() *nodeid.Provider {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return sess.provider
}

// whenLost registers an action to run the moment the lease is lost.
func (sess *session) whenLost(f func(error)) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	sess.onLost = append(sess.onLost, f)
}

func (sess *session) handleLost(err error) {
	sess.mu.Lock()
	actions := append([]func(error){}, sess.onLost...)
	sess.mu.Unlock()
	for _, f := range actions {
		f(err)
	}
	select {
	case sess.lost <- err:
	default:
	}
}

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
			sess.log.Info("renewals recovered", "node_id", e.Instance.ID, "version", int64(e.Instance.Version), "failed_attempts", n)
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
	sess.waiting = false
	err := writeLeaseFile(sess.leaseFile, l)
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

// writeLeaseFile is leasefile.Write with this host's boot ID, or a failure
// when the test-only NODEID_TEST_LEASE_FILE_FAIL is set.
func writeLeaseFile(path string, l leasefile.Lease) error {
	if os.Getenv("NODEID_TEST_LEASE_FILE_FAIL") != "" {
		return fmt.Errorf("lease file: test failure (NODEID_TEST_LEASE_FILE_FAIL)")
	}
	l.BootID = leasefile.BootID()
	return leasefile.Write(path, l)
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

// lossErr is the reason the tenure ended like a loss, or nil: the lease was
// lost, or the lease file could not be kept current.
func (sess *session) lossErr() error {
	if err := sess.provider.Err(); errors.Is(err, nodeid.ErrLeaseLost) {
		return err
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return sess.fenced
}

// prepareDataDir prepares node-N/vK when a data root is set. It is
// cancelled if the lease is lost meanwhile.
func (sess *session) prepareDataDir(ctx context.Context, inst nodeid.NodeInstance) (string, error) {
	if sess.s.dataRoot == "" {
		return "", nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sess.provider.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	settle := sess.s.leaseDuration
	if settle == 0 {
		settle = nodeid.DefaultLeaseDuration
	}
	dir, res, err := datadir.Prepare(ctx, sess.s.dataRoot, inst, datadir.Options{
		PreviousGraceful: sess.provider.PreviousGracefullyShutdown(),
		// A stale holder renews nothing: a file it wrote less than a lease
		// ago may be one it is still writing, so it is copied, not linked.
		SettleTime: settle,
		Immutable:  sess.s.immutable,
		Skip:       sess.s.skip,
		Rules:      sess.s.dataRules,
		Keep:       sess.s.keepVersions,
		Workers:    sess.s.dataWorkers,
		Logger:     sess.log,
		Cluster:    datadir.Cluster{Bucket: sess.s.bucket, Prefix: sess.s.prefix},
		// Only this task may redo its own unfinished preparation of inst.
		Tenure: sess.cfg.TaskID,
	})
	if err != nil {
		if lerr := sess.provider.Err(); lerr != nil {
			return "", lerr
		}
		if isDataRefusal(err) {
			sess.dataRefused = true
			return "", fmt.Errorf("prepare data directory: %w; %s", err, dataAdvice(err, inst))
		}
		return "", fmt.Errorf("prepare data directory: %w", err)
	}
	_ = res // datadir logs "datadir: prepared" with the counts: not repeated here
	return dir, nil
}

// isDataRefusal reports that Prepare refused because of what is in the data
// root. Retrying cannot help, so it exits 6, and the lease is left to expire:
// a release would tell the successor it may hard-link files whose writer is
// unknown.
func isDataRefusal(err error) bool {
	for _, r := range []error{datadir.ErrNewerVersion, datadir.ErrVersionUsed, datadir.ErrUnrecognized, datadir.ErrForeignCluster} {
		if errors.Is(err, r) {
			return true
		}
	}
	return false
}

// dataAdvice tells the operator what to do about a data refusal.
func dataAdvice(err error, inst nodeid.NodeInstance) string {
	const left = "the data root is unchanged and the lease is left to expire"
	switch {
	case errors.Is(err, datadir.ErrVersionUsed):
		return fmt.Sprintf("%s. Another task holds, or held, version %d of node %d too (its lease went backwards: its object was deleted, recreated or reset): "+
			"keep that directory; the next takeover raises the version and collects it if it was never completed", left, int64(inst.Version), inst.ID)
	case errors.Is(err, datadir.ErrNewerVersion):
		return fmt.Sprintf("%s. The lease of node %d went backwards (its object was deleted, recreated or reset): "+
			"keep that directory; every takeover raises the version by one, so node %d starts again once its version is above that directory's",
			left, inst.ID, inst.ID)
	case errors.Is(err, datadir.ErrUnrecognized):
		return left + ". Check that directory by hand, and move it out of the node directory if it holds nothing needed"
	}
	return left + ". Check --data-root, --bucket and --prefix: one data root serves one cluster"
}

// giveBack ends a tenure whose broker never ran. A release tells the
// successor that nobody writes the newest data directory any more, so it may
// hard-link it: true when ours was prepared (a copy nobody writes), or when
// our predecessor had released its lease. Otherwise the newest directory may
// still belong to a stale holder, and the lease is left to expire instead, so
// the successor copies rather than links. After a data refusal it is left to
// expire too: the data root's state is for an operator to sort out.
func (sess *session) giveBack(prepared bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := sess.provider
	if sess.dataRefused {
		if _, err := p.HandOff(ctx); err == nil {
			sess.log.Warn("lease left to expire: the data root refused this version",
				"node_id", p.Instance().ID, "version", int64(p.Instance().Version))
		}
		return
	}
	if prepared || sess.s.dataRoot == "" || p.PreviousGracefullyShutdown() {
		sess.closeProvider(ctx)
		return
	}
	if _, err := p.HandOff(ctx); err == nil {
		sess.log.Warn("lease left to expire: the previous holder did not release it and no new data directory was prepared",
			"node_id", p.Instance().ID, "version", int64(p.Instance().Version))
	}
}

// nodeEnv is the environment that tells a broker who it is.
func (sess *session) nodeEnv(inst nodeid.NodeInstance, dataDir string) []string {
	env := []string{
		fmt.Sprintf("NODE_ID=%d", inst.ID),
		fmt.Sprintf("NODE_VERSION=%d", inst.Version),
		fmt.Sprintf("NODE_CLUSTER_SIZE=%d", sess.cfg.ClusterSize),
		fmt.Sprintf("NODE_PREVIOUS_GRACEFUL=%t", sess.provider.PreviousGracefullyShutdown()),
		"NODE_TASK_ID=" + sess.cfg.TaskID,
	}
	if dataDir != "" {
		env = append(env, "NODE_DATA_DIR="+dataDir)
	}
	if sess.leaseFile != "" {
		env = append(env, "NODE_LEASE_FILE="+sess.leaseFile)
	}
	return env
}

// defaultLeasePath is run's default lease file, $TMPDIR/nodeid-<uid>/lease.json:
// stable, so that `nodeid-init health` (an ECS health check, run in the
// same container) finds it without configuration, and one file per user
// rather than one per process.
func defaultLeasePath() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("nodeid-%d", os.Getuid()), "lease.json")
}

// checkTempDir verifies, without writing, that the default lease file's
// directory can be created in $TMPDIR.
func checkTempDir() error {
	dir := os.TempDir()
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return usagef("lease file: $TMPDIR %s is not writable: set --lease-file or NODEID_LEASE_FILE", dir)
	}
	return nil
}

// claimDefaultLeaseFile takes the default lease file for this process: it
// creates $TMPDIR/nodeid-<uid> (mode 0755, a broker that dropped
// privileges still reads it) and locks lease.lock in it for as long as the
// process lives. The directory must be ours and writable by us alone, so
// nobody else on a shared /tmp can plant a file or a symlink there.
//
// A second `run` in the same container or host (the lock is held) gets a
// private directory of its own instead, removed when it exits, and a
// warning: `health` without --lease-file checks the first one's. The stable
// file itself is left in place on exit (its state says released or lost)
// and overwritten by the next run.
func claimDefaultLeaseFile(log *slog.Logger) (path string, cleanup func(), err error) {
	warnNonStickyTempDir(log)
	path = defaultLeasePath()
	dir := filepath.Dir(path)
	reason := ""
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", nil, usagef("lease file: cannot create %s: %v", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return "", nil, usagef("lease file: %s: %v", dir, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		reason = dir + " is not a directory"
	case int(st.Uid) != os.Getuid():
		reason = fmt.Sprintf("%s belongs to uid %d", dir, st.Uid)
	case st.Mode&0o022 != 0:
		reason = dir + " is writable by others"
	}
	if reason == "" {
		f, err := os.OpenFile(filepath.Join(dir, "lease.lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o644)
		if err != nil {
			return "", nil, usagef("lease file: %v", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
			return path, func() { f.Close() }, nil
		}
		f.Close()
		reason = "another nodeid-init run uses it"
	}
	private, err := os.MkdirTemp("", "nodeid-")
	if err == nil {
		err = os.Chmod(private, 0o755)
	}
	if err != nil {
		return "", nil, usagef("lease file: cannot create its directory in %s: %v", os.TempDir(), err)
	}
	// Held open from now on: the cleanup removes what is in this very
	// directory, even if someone renamed it and put a symlink or another
	// directory at its path ($TMPDIR without the sticky bit).
	dirFd, err := unix.Open(private, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(private)
		return "", nil, usagef("lease file: cannot open its directory %s: %v", private, err)
	}
	path = filepath.Join(private, "lease.json")
	log.Warn("default lease file not available, using a private one: nodeid-init health needs --lease-file "+path+" (or NODE_LEASE_FILE)",
		"default", defaultLeasePath(), "reason", reason, "lease_file", path)
	cleanup = func() { removePrivateDir(dirFd, private) }
	return path, cleanup, nil
}

// removePrivateDir removes the private lease directory that dirFd was
// opened on: only the names run writes there (the lease file, the peers
// file and their temporary files), unlinked relative to dirFd, never
// through a path that may have been swapped; then the directory itself,
// only if path still names it (same device and inode, not a symlink).
func removePrivateDir(dirFd int, path string) {
	defer unix.Close(dirFd)
	if d, err := unix.Dup(dirFd); err == nil {
		f := os.NewFile(uintptr(d), path)
		names, _ := f.Readdirnames(-1)
		f.Close()
		for _, name := range names {
			if name == "lease.json" || name == "lease-peers.json" || strings.HasPrefix(name, ".lease-") {
				_ = unix.Unlinkat(dirFd, name, 0)
			}
		}
	}
	var ours, there unix.Stat_t
	if unix.Fstat(dirFd, &ours) != nil || unix.Lstat(path, &there) != nil {
		return
	}
	if there.Mode&unix.S_IFMT == unix.S_IFDIR && there.Dev == ours.Dev && there.Ino == ours.Ino {
		_ = unix.Rmdir(path)
	}
}

// warnNonStickyTempDir warns when $TMPDIR is writable by others without the
// sticky bit: anyone may then rename the lease file's directory and put
// another in its place, and the broker would read whatever is there.
func warnNonStickyTempDir(log *slog.Logger) {
	var st unix.Stat_t
	if err := unix.Stat(os.TempDir(), &st); err == nil && st.Mode&0o002 != 0 && st.Mode&unix.S_ISVTX == 0 {
		log.Warn("$TMPDIR is writable by everyone but not sticky: another user can replace the lease file's directory; set --lease-file (or NODEID_LEASE_FILE) to a file in a directory only this user can write",
			"tmpdir", os.TempDir())
	}
}

// writeWaiting publishes that this task waits for a node ID (a hot spare):
// `health` passes, a broker finds no valid lease. The state stands for two
// poll intervals and is refreshed every poll interval until the first event
// is written or ctx ends, so the file of a task that died while waiting
// goes stale by itself; stopWaiting says `stopped` on the way out.
func (sess *session) writeWaiting(ctx context.Context) {
	sess.metrics.waiting.Set(1)
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

func (sess *session) writeWaitingLocked() error {
	return writeLeaseFile(sess.leaseFile, leasefile.Lease{State: leasefile.StateWaiting, NodeID: -1, TaskID: sess.cfg.TaskID,
		ValidUntilBoottimeNs: int64(clock.SystemBoottime() + 2*sess.cfg.PollInterval)})
}

// stopWaiting, on the way out of a task that never acquired, replaces a
// `waiting` lease file with `stopped`, so `health` fails at once.
func (sess *session) stopWaiting() {
	sess.fileMu.Lock()
	defer sess.fileMu.Unlock()
	if !sess.waiting {
		return
	}
	sess.waiting = false
	if err := writeLeaseFile(sess.leaseFile, leasefile.Lease{State: leasefile.StateStopped, NodeID: -1, TaskID: sess.cfg.TaskID}); err != nil {
		sess.log.Warn("cannot write the lease file", "path", sess.leaseFile, "err", err)
	}
}

// hintScaledUp tells a task that waits for a node ID, once, that the bucket
// has acquirable IDs at or above its cluster size: the cluster was scaled
// up (nodeid-init scale) but this task still has the old
// NODEID_CLUSTER_SIZE, and only takes IDs below it. It costs one LIST and a
// GET per such object, only when still waiting after two poll intervals.
func (sess *session) hintScaledUp(ctx context.Context) {
	p := sess.provider
	select {
	case <-ctx.Done():
		return
	case <-p.Done():
		return
	case <-time.After(2*sess.cfg.PollInterval + time.Second):
	}
	if _, held := p.Deadline(); held {
		return
	}
	listing, err := sess.repo.List(ctx)
	if err != nil {
		return
	}
	var above []int
	for _, slot := range listing.Slots {
		if slot.ID < sess.cfg.ClusterSize {
			continue
		}
		if rec, err := sess.repo.Get(ctx, slot.ID); err == nil && rec.Lease.Acquirable {
			above = append(above, slot.ID)
		}
	}
	if len(above) > 0 {
		sess.log.Warn(fmt.Sprintf("the bucket has acquirable node IDs at or above this task's cluster size %d (%s): the cluster was scaled up; set NODEID_CLUSTER_SIZE=%d (and the broker's own size) to take them",
			sess.cfg.ClusterSize, idRanges(above), above[len(above)-1]+1), "cluster_size", sess.cfg.ClusterSize)
	}
}

// lossExit is the exit 3 of a lost tenure. The provider has logged the loss
// ("lease lost", with its reason and cause) at ERROR: it is not repeated as
// the final error line. A tenure ended by the lease file (see handleEvent)
// was not logged as a loss, so its error is the final line.
func (sess *session) lossExit(lerr error) error {
	if perr := sess.provider.Err(); perr != nil && errors.Is(perr, nodeid.ErrLeaseLost) && perr == lerr {
		return &codeError{code: exitLeaseLost}
	}
	return &codeError{code: exitLeaseLost, err: lerr}
}

// closeProvider releases the lease. A failed release write is logged by the
// provider ("release failed; the lease will expire"); only a release that
// did not finish in time is logged here, so no failure is logged twice.
func (sess *session) closeProvider(ctx context.Context) {
	if err := sess.provider.Close(ctx); err != nil && ctx.Err() != nil {
		sess.log.Warn("release did not finish in time; the lease will expire", "err", err)
	}
}
