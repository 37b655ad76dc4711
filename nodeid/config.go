package nodeid

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/nodeid/nodeid/clock"
)

// Defaults of the timing rules; see docs/design.md.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultPollInterval  = time.Second
)

// ExitCodeLeaseLost is the process exit code of the default OnLost handler.
const ExitCodeLeaseLost = 3

// AcquireStrategy chooses how a task looks for a free node ID.
type AcquireStrategy string

const (
	// StrategySpread (the default) lists every lease in one request and
	// starts at a task-specific ID, so tasks starting together spread out.
	StrategySpread AcquireStrategy = "spread"
	// StrategySequential is the anchor's strategy (Camunda's S3 provider),
	// kept as a baseline for benchmarks: IDs in order, GET then PUT each,
	// exponential backoff up to 30 s after a full pass.
	StrategySequential AcquireStrategy = "sequential"
)

// Config configures a Provider. Zero values take the defaults noted.
//
// Timing rules, checked by NewProvider (L lease duration, R renew interval,
// m safety margin, T request timeout):
//
//	0 < T < R,  2R <= L - m,  0 < m < L
//
// The holder treats its lease as valid until s + L - m, s being the moment
// it SENT its last successful renewal; with 2R <= L - m it gets at least two
// renewal attempts before that deadline, and each attempt's timeout ends
// before it.
type Config struct {
	// TaskID names this task in lease objects (the ECS task ARN, say).
	// Printable ASCII without spaces, at most 256 characters. Required.
	TaskID string
	// ClusterSize is the number of node IDs, 0..ClusterSize-1. Required.
	ClusterSize int
	// AllowedIDs restricts which IDs this task may take (e.g. the even IDs
	// in one zone). Empty allows all.
	AllowedIDs []int
	// Address is where peers reach this task (host or host:port), published
	// in every write of its lease (see Peers). Empty publishes none.
	Address string

	// LeaseDuration L: how long a lease stays valid without renewal.
	// Default 15s.
	LeaseDuration time.Duration
	// RenewInterval R: time between renewals. Default L/3.
	RenewInterval time.Duration
	// SafetyMargin m: the holder stops acting m before its lease could
	// expire for anyone else, to cover clock-rate drift and scheduling
	// delay. Default L/5.
	SafetyMargin time.Duration
	// RequestTimeout T bounds each S3 request. Default R/2, at most 5s.
	RequestTimeout time.Duration
	// PollInterval: a waiting task lists the leases again at least this
	// often (at random between half of it and all of it) while every ID is
	// held. Default 1s.
	PollInterval time.Duration
	// SpareListInterval, when longer than PollInterval: a waiting task on a
	// repository with the release hint (S3Repository) reads the hint (a
	// HEAD) every PollInterval and lists the leases only when it changed or
	// this long after its last listing, so a graceful release is still
	// taken within PollInterval but an expired lease (a crashed holder) up
	// to SpareListInterval later. Zero (the default) lists at every poll.
	// nodeid-init sets R (NODEID_SPARE_LIST_INTERVAL).
	SpareListInterval time.Duration
	// Strategy: how to look for a free ID. Default StrategySpread.
	Strategy AcquireStrategy
	// AcquireTimeout: give up acquiring after this long with
	// ErrAcquireTimeout. Zero waits until the context ends.
	AcquireTimeout time.Duration
	// ReadinessTimeout: after an ungraceful takeover, Ready waits until
	// every live peer's lease lists our new version, or this long (then it
	// fails open, with a warning). Zero means ready at once.
	ReadinessTimeout time.Duration
	// MappingsRefreshInterval: how often the holder reads its peers' leases
	// to learn their versions. Default L × max(1, ClusterSize/333): the
	// cluster's listing rate stays about constant above 333 nodes
	// (docs/design.md, "Learning peers at scale").
	MappingsRefreshInterval time.Duration

	// OnLost is called once, outside any lock, when the lease is lost. The
	// default logs one line and exits the process with ExitCodeLeaseLost:
	// a node that may no longer own its ID must stop at once.
	OnLost func(err error)
	// OnFence, when set, is called once when the lease is lost, before
	// anything else the loss does (the log line, OnEvent, the restore of a
	// deleted object, OnLost), from the goroutine that saw the loss. It is
	// the place to kill what uses the ID: it must not block, log, write a
	// file or take a lock that I/O may hold.
	OnFence func(err *LostError)
	// OnEvent, when set, receives every state change (see Event), from the
	// provider's goroutines and outside its lock. It must not block.
	OnEvent func(Event)

	// Clock, Wall, Logger and Rand are for tests and simulations.
	Clock clock.Clock // default clock.Real()
	// Wall is the system's wall clock, read only for the expiry timestamp
	// a held lease's body carries, which Camunda's provider compares with
	// its own wall clock (this tool never decides by it). Clock.Now is the
	// wall clock at start plus the time since, and drifts from the system's
	// if the system's is stepped later; the later of the two is written, so
	// the timestamp is not early if either is right. Default: time.Now with
	// the real Clock, Clock.Now with an injected one (deterministic tests).
	Wall   func() time.Time
	Logger *slog.Logger
	Rand   *rand.Rand // jitter, start offsets and nonces; default seeded randomly
}

// WithDefaults returns c with zero values replaced by defaults.
func (c Config) WithDefaults() Config {
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.RenewInterval == 0 {
		c.RenewInterval = c.LeaseDuration / 3
	}
	if c.SafetyMargin == 0 {
		c.SafetyMargin = c.LeaseDuration / 5
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = min(c.RenewInterval/2, 5*time.Second)
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.MappingsRefreshInterval == 0 {
		c.MappingsRefreshInterval = c.LeaseDuration * time.Duration(max(1, c.ClusterSize/refreshNodesPerL))
	}
	if c.Strategy == "" {
		c.Strategy = StrategySpread
	}
	if c.Wall == nil && c.Clock == nil {
		c.Wall = time.Now
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	if c.Wall == nil {
		c.Wall = c.Clock.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Rand == nil {
		c.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	return c
}

// MinLeaseDuration is the shortest lease accepted: two ticks of S3's clock.
const MinLeaseDuration = 2 * ServerClockGranularity

// minSafetyMargin is the smallest margin accepted for lease duration L.
func minSafetyMargin(L time.Duration) time.Duration {
	return max(100*time.Millisecond, L/20)
}

// Validate checks the configuration after defaults are applied. Every error
// wraps ErrInvalidConfig and names the setting.
func (c Config) Validate() error {
	if err := ValidateTaskID(c.TaskID); err != nil {
		return err
	}
	return c.ValidateExceptTaskID()
}

// ValidateExceptTaskID is Validate without the task ID, for a command that
// checks its settings before it has resolved which task it runs as.
func (c Config) ValidateExceptTaskID() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	if c.ClusterSize < 1 {
		return bad("cluster size %d: must be >= 1", c.ClusterSize)
	}
	seen := map[int]bool{}
	for _, id := range c.AllowedIDs {
		if id < 0 || id >= c.ClusterSize {
			return bad("allowed id %d: outside 0..%d", id, c.ClusterSize-1)
		}
		if seen[id] {
			return bad("allowed id %d listed twice", id)
		}
		seen[id] = true
	}
	if c.Address != "" {
		if err := ValidateAddress(c.Address); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	L, R, m, T := c.LeaseDuration, c.RenewInterval, c.SafetyMargin, c.RequestTimeout
	switch {
	case L < MinLeaseDuration:
		return bad("lease duration %v: must be at least %v: S3's Date and Last-Modified count whole seconds, so a candidate's server-clock rule needs Date - Last-Modified >= L + 1s and a shorter lease is lost in that rounding", L, MinLeaseDuration)
	case m < minSafetyMargin(L) || m >= L:
		return bad("safety margin %v: must be at least %v (max(100ms, L/20): it absorbs clock-rate drift and the delay between the watchdog and the stop) and below the lease duration %v", m, minSafetyMargin(L), L)
	case R <= 0:
		return bad("renew interval %v: must be > 0", R)
	case 2*R > L-m:
		return bad("renew interval %v: must be at most (lease duration %v - safety margin %v)/2 = %v, so two renewals fit before the self-fence deadline", R, L, m, (L-m)/2)
	case T <= 0 || T >= R:
		return bad("request timeout %v: must be > 0 and < renew interval %v", T, R)
	case c.Strategy != StrategySpread && c.Strategy != StrategySequential:
		return bad("acquire strategy %q: want %q or %q", c.Strategy, StrategySpread, StrategySequential)
	case c.PollInterval <= 0:
		return bad("poll interval %v: must be > 0", c.PollInterval)
	case c.AcquireTimeout < 0:
		return bad("acquire timeout %v: must be >= 0", c.AcquireTimeout)
	case c.ReadinessTimeout < 0:
		return bad("readiness timeout %v: must be >= 0", c.ReadinessTimeout)
	case c.SpareListInterval < 0:
		return bad("spare list interval %v: must be >= 0", c.SpareListInterval)
	case c.MappingsRefreshInterval <= 0:
		return bad("mappings refresh interval %v: must be > 0", c.MappingsRefreshInterval)
	}
	return nil
}

// ValidateTaskID checks a task ID: 1 to 256 ASCII letters, digits and
// taskIDPunct. It travels in an HTTP header and reaches peers' templates
// and env files, where no character of it may be shell syntax.
func ValidateTaskID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: task id is empty", ErrInvalidConfig)
	}
	if len(id) > maxTaskIDLen {
		return fmt.Errorf("%w: task id is %d characters, at most %d", ErrInvalidConfig, len(id), maxTaskIDLen)
	}
	for i := 0; i < len(id); i++ {
		if !taskIDChar(id[i]) {
			return fmt.Errorf("%w: task id %q: only ASCII letters, digits and %s", ErrInvalidConfig, id, taskIDPunct)
		}
	}
	return nil
}
