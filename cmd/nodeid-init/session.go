package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

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
	// leaseOut and peersOut are the lease file and the peers file in their
	// directories held since the start (heldfile.go); nil when not written.
	leaseOut *heldFile
	peersOut *heldFile
	logw     *logWriter   // the log's stderr: never blocks (logwriter.go)
	fence    fence        // kills the command's tree first on a loss (fence.go)
	writes   outputWrites // output writes in flight (beginRelease waits for them)

	// dataRefused is why the data root refused this lease (see
	// isDataRefusal): the lease must then expire, not be released.
	dataRefused error

	mu     sync.Mutex
	onLost []func(error) // run before the loss is reported, e.g. kill the child
	lost   chan error

	// lostHandled is closed once handleLost has run, i.e. after the
	// provider logged the loss and ran its restore (see awaitLossHandled).
	lostHandled     chan struct{}
	lostHandledOnce sync.Once
	// lossAt is when the provider fenced the loss (Unix ns, 0 before):
	// every wait for the loss to be handled shares one deadline from it.
	lossAt atomic.Int64

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
	// abandoned is set (under fileMu) once a file-system phase hung: the
	// lease file then says `lost`, and no later event may overwrite it.
	abandoned bool

	// tmplData is what run rendered the templates with before the command
	// started, tmplOut what they gave: followPeers renders them again when
	// the peers change (nil for other commands).
	tmplData *templateData
	tmplOut  [][]byte

	// stopRequested is closed when a stop signal came before the command
	// started (run), nil otherwise: it ends a hung output write early.
	stopRequested chan struct{}

	// spare is set while the task waits for a node ID (a hot spare), with
	// or without a lease file: /healthz passes for it, as `health` does
	// for the `waiting` lease file.
	spare atomic.Bool
}

// leaseOptions are the settings of commands that take a lease.
var leaseOptions = append([]string{"cluster-size", "lease-duration", "renew-interval", "acquire-timeout", "poll-interval",
	"spare-list-interval", "readiness-timeout", "allowed-ids", "task-id", "metrics-addr", "skip-probe", "advertise-address"}, s3Options...)

var dataOptions = []string{"data-root", "keep-versions", "data-workers", "immutable", "skip", "data-preset", "fs-timeout"}

// newSession validates what is left to validate, then connects: nothing
// is written to S3 or the data root before this returns.
func newSession(ctx context.Context, s *settings, stderr io.Writer) (_ *session, err error) {
	if err := s.requireBucket(); err != nil {
		return nil, err
	}
	if err := s.requireClusterSize(); err != nil {
		return nil, err
	}
	if err := s.checkDataRoot(); err != nil {
		return nil, err
	}
	if err := s.checkDataOwner(); err != nil {
		return nil, err
	}
	lw := newLogWriter(stderr)
	defer func() {
		if err != nil {
			lw.Close(logFlushTimeout) // before the final error line
		}
	}()
	log := s.logger(lw)
	cfg, err := s.providerConfig(log)
	if err != nil {
		return nil, err
	}
	sess := &session{s: s, cfg: cfg, log: log, logw: lw, metrics: newMetrics(), lost: make(chan error, 1), lostHandled: make(chan struct{})}
	registerLogDrops(sess.metrics.reg, lw)
	registerFenceLeft(sess.metrics.reg, sess.fenceLeft)
	sess.metrics.clusterSize.Set(float64(cfg.ClusterSize))
	if s.metricsAddr != "" {
		if err := serveHealth(ctx, s.metricsAddr, sess.metrics, sess.healthy, sess.ready, log); err != nil {
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
	sess.repo.SetLogger(sess.log)
	registerThrottled(sess.metrics.reg, sess.repo.Throttled)
	if err := s.probe(ctx, sess.repo, sess.log); err != nil {
		return nil, err
	}
	s.warnRootLeases(ctx, sess.repo, sess.log)
	// After the probe, so that bad input still gets one line on stderr.
	var source string
	if cfg.Address, source = resolveAddress(ctx, s, defaultAddressSources(), sess.log); cfg.Address != "" {
		sess.log.Info("advertised address", "address", cfg.Address, "source", source)
	}
	if testHooks.clock != nil {
		c, err := testHooks.clock(sess.log)
		if err != nil {
			return nil, err
		}
		if c != nil {
			cfg.Clock = c
		}
	}
	cfg.OnFence = func(e *nodeid.LostError) {
		sess.lossAt.CompareAndSwap(0, time.Now().UnixNano()) // the vDSO clock: no wait
		sess.fence.kill(e)
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

// fenceLeft is the time left before the self-fence deadline, and whether a
// lease is held.
func (sess *session) fenceLeft() (time.Duration, bool) {
	p := sess.currentProvider()
	if p == nil {
		return 0, false
	}
	deadline, held := p.Deadline()
	return deadline.Sub(p.Config().Clock.Now()), held
}

// whenLost registers an action to run the moment the lease is lost.
func (sess *session) whenLost(f func(error)) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	sess.onLost = append(sess.onLost, f)
}

func (sess *session) handleLost(err error) {
	sess.fence.kill(nil) // first, and without sess.mu: see fence.go
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
	sess.lostHandledOnce.Do(func() { close(sess.lostHandled) })
}

// awaitLossHandled waits, once the tree is dead, until the provider has
// finished the loss: its log line and the restore of a deleted or corrupt
// object's version run after the fence (OnFence), and exiting before them
// would cut the restore short and let the next holder start from a lower
// version. Every command that takes a lease defers it, so no exit path
// (a loss before the command started, during the preparation, ...) skips
// it. Bounded: the restore is bounded by the old deadline, at most L away.
// Every call shares one deadline, L + 2 s after the loss was fenced, so the
// calls on the way out (lost, closeOutputs, the deferred ones) add no wait
// of their own when the loss is never handled (its lease-file write hung).
func (sess *session) awaitLossHandled() {
	p := sess.currentProvider()
	if p == nil || !errors.Is(p.Err(), nodeid.ErrLeaseLost) {
		return // no loss, or the lease file ended the tenure: nothing to wait for
	}
	sess.lossAt.CompareAndSwap(0, time.Now().UnixNano()) // a loss not fenced (none ran)
	deadline := time.Unix(0, sess.lossAt.Load()).Add(p.Config().LeaseDuration + 2*time.Second)
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-sess.lostHandled:
	case <-timer.C:
	}
}

// minReleaseTimeout bounds a release or hand-off whose lease has little or
// no validity left.
const minReleaseTimeout = 10 * time.Second

// releaseContext bounds a release. A release that finds the object deleted,
// or replaced below our version, restores our version (the provider's
// recreateDeleted), which may retry until the self-fence deadline: the bound
// must not end before the provider's own, or the process exits with the
// version gone. At least minReleaseTimeout; at most L plus the margin.
func (sess *session) releaseContext() (context.Context, context.CancelFunc) {
	p := sess.provider
	cfg := p.Config()
	timeout := minReleaseTimeout
	if deadline, held := p.Deadline(); held {
		timeout = max(timeout, deadline.Sub(cfg.Clock.Now())+cfg.SafetyMargin+time.Second)
	}
	return context.WithTimeout(context.Background(), timeout)
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

// giveBack ends a tenure whose broker never ran. A release tells the
// successor that nobody writes the newest data directory any more, so it may
// hard-link it: true when ours was prepared (a copy nobody writes), or when
// our predecessor had released its lease. Otherwise the newest directory may
// still belong to a stale holder, and the lease is left to expire instead, so
// the successor copies rather than links. After a data refusal it is left to
// expire too: the data root's state is for an operator to sort out.
func (sess *session) giveBack(prepared bool) {
	ctx, cancel := sess.releaseContext()
	defer cancel()
	p := sess.provider
	if sess.dataRefused != nil {
		if err := p.LeaveToExpire(ctx); err == nil {
			sess.tenureLog(p.Instance()).Warn("lease left to expire, not released: the data root refused it", "err", sess.dataRefused)
		}
		return
	}
	if prepared || sess.s.dataRoot == "" || p.PreviousGracefullyShutdown() {
		sess.closeProvider(ctx)
		return
	}
	if err := p.LeaveToExpire(ctx); err == nil {
		sess.tenureLog(p.Instance()).Warn("lease left to expire: the previous holder did not release it and no new data directory was prepared")
	}
}

// tenureLog is the session's logger for the tenure of inst: every line
// names the node ID and version.
func (sess *session) tenureLog(inst nodeid.NodeInstance) *slog.Logger {
	return sess.log.With("node_id", inst.ID, "version", int64(inst.Version))
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
	sess.beginRelease() // never a release after a hang, nor with a write in flight
	if err := sess.provider.Close(ctx); err != nil && ctx.Err() != nil {
		sess.log.Warn("release did not finish in time; the lease will expire", "err", err)
	}
}
