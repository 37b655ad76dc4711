package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/nodeid/nodeid/datadir"
	"github.com/nodeid/nodeid/nodeid"
)

// errHelp is returned after -h printed the flags: exit 0.
var errHelp = errors.New("help requested")

// settings is the configuration of every subcommand. Each field has a flag
// and a NODEID_* variable; the flag wins.
type settings struct {
	bucket, prefix   string
	clusterSize      int
	leaseDuration    time.Duration
	renewInterval    time.Duration
	acquireTimeout   time.Duration
	pollInterval     time.Duration
	readinessTimeout time.Duration
	stopTimeout      time.Duration
	allowedIDs       []int
	taskID           string
	dataRoot         string
	keepVersions     int
	dataWorkers      int
	immutable, skip  []string
	dataRules        datadir.CopyRules
	envFile          string
	handoffFile      string
	leaseFile        string
	metricsAddr      string
	logFormat        string
	logLevel         slog.Level
	endpoint, region string
	pathStyle        bool
	skipProbe        bool
	advertiseAddress string
	peersFile        string
	templates        []*templateSpec
	// status, release, peers, scale, bootstrap
	json, watch, force bool
	check, dryRun, yes bool
	// explicit names the options set by a flag on the command line.
	explicit map[string]bool
	// sources names where each option's value came from (--flag, its
	// variable or "default"), for logs.
	sources map[string]string
}

// option is one setting: its flag, its variable and how to parse it.
type option struct {
	flag, env, def, usage string
	set                   func(s *settings, v string) error
}

var options = []option{
	{"bucket", "NODEID_BUCKET", "", "S3 bucket of the lease objects (required)", func(s *settings, v string) error {
		s.bucket = v
		if v == "" {
			return nil
		}
		return nodeid.ValidateBucket(v)
	}},
	{"prefix", "NODEID_PREFIX", "", "key prefix, e.g. zeebe-prod/, so clusters can share a bucket", func(s *settings, v string) error {
		s.prefix = v
		return nodeid.ValidatePrefix(v)
	}},
	{"cluster-size", "NODEID_CLUSTER_SIZE", "", "number of node IDs, 0..N-1 (1..1024)", func(s *settings, v string) error {
		return parseIntIn(v, 1, maxClusterSize, &s.clusterSize)
	}},
	{"lease-duration", "NODEID_LEASE_DURATION", "15s", "lease duration L (1s..1h)", func(s *settings, v string) error {
		return parseDurationIn(v, minLeaseDuration, maxLeaseDuration, &s.leaseDuration)
	}},
	{"renew-interval", "NODEID_RENEW_INTERVAL", "", "renew interval (default L/3; at least 100ms)", func(s *settings, v string) error {
		return parseDurationIn(v, minInterval, maxLeaseDuration, &s.renewInterval)
	}},
	{"acquire-timeout", "NODEID_ACQUIRE_TIMEOUT", "", "give up acquiring after this long (default: wait forever); exit 5", func(s *settings, v string) error {
		return parseDurationIn(v, 0, 0, &s.acquireTimeout)
	}},
	{"poll-interval", "NODEID_POLL_INTERVAL", "1s", "while every ID is held, list the leases again at least this often (100ms..1h)", func(s *settings, v string) error {
		return parseDurationIn(v, minInterval, maxLeaseDuration, &s.pollInterval)
	}},
	{"readiness-timeout", "NODEID_READINESS_TIMEOUT", "", "after an ungraceful takeover, wait this long for peers to learn our version before /readyz turns ready (at most 1h)", func(s *settings, v string) error {
		return parseDurationIn(v, 0, maxLeaseDuration, &s.readinessTimeout)
	}},
	{"stop-timeout", "NODEID_STOP_TIMEOUT", "25s", "run: after SIGTERM, how long the child may take to stop before SIGKILL (at most 1h)", func(s *settings, v string) error {
		return parseDurationIn(v, 0, maxLeaseDuration, &s.stopTimeout)
	}},
	{"allowed-ids", "NODEID_ALLOWED_IDS", "", "IDs this task may take, e.g. 0,2,4 or 0-5", func(s *settings, v string) error {
		ids, err := parseIDList(v)
		s.allowedIDs = ids
		return err
	}},
	{"task-id", "NODEID_TASK_ID", "", "this task's identity (default: ECS task ARN, else hostname plus a random suffix)", func(s *settings, v string) error {
		s.taskID = v
		if v == "" {
			return nil
		}
		return nodeid.ValidateTaskID(v)
	}},
	{"data-root", "NODEID_DATA_ROOT", "", "shared storage root; when set, node-N/vK is prepared there", func(s *settings, v string) error {
		s.dataRoot = v
		return nil
	}},
	{"keep-versions", "NODEID_KEEP_VERSIONS", "2", "valid data directory versions kept, the current one included (1: only the current one)", func(s *settings, v string) error {
		return parseIntIn(v, 1, 1000, &s.keepVersions)
	}},
	{"data-workers", "NODEID_DATA_WORKERS", "32", "goroutines that copy, link and validate the data directory at once (1-1024); on EFS each file costs round trips that overlap", func(s *settings, v string) error {
		return parseIntIn(v, 1, 1024, &s.dataWorkers)
	}},
	{"immutable", "NODEID_IMMUTABLE", "", "comma-separated patterns of files never modified once written (hard-linked even after a crash), e.g. snapshots/**", func(s *settings, v string) error {
		s.immutable = splitList(v)
		return nil
	}},
	{"skip", "NODEID_SKIP", "", "comma-separated patterns not carried to the new version, e.g. runtime/**,**/*.lock", func(s *settings, v string) error {
		s.skip = splitList(v)
		return nil
	}},
	{"data-preset", "NODEID_DATA_PRESET", datadir.PresetDefault, "copy rules of the data directory: default (only --immutable and --skip) or zeebe (skip runtime/, hard-link snapshots/ and bootstrap-snapshots/ at any depth even after a crash)", func(s *settings, v string) error {
		if v != datadir.PresetDefault && v != datadir.PresetZeebe {
			return fmt.Errorf("want %s or %s", datadir.PresetDefault, datadir.PresetZeebe)
		}
		var err error
		s.dataRules, err = datadir.Preset(v)
		return err
	}},
	{"env-file", "NODEID_ENV_FILE", "", "acquire: file to write NODE_ID=... to", func(s *settings, v string) error {
		s.envFile = v
		return nil
	}},
	{"handoff-file", "NODEID_HANDOFF_FILE", "", "acquire/renew: the lease hand-off file (default: nodeid-handoff.json beside the env file)", func(s *settings, v string) error {
		s.handoffFile = v
		return nil
	}},
	{"lease-file", "NODEID_LEASE_FILE", "", "run/acquire/renew: file kept current with the fencing token and monotonic deadline (run: default $TMPDIR/nodeid-<uid>/lease.json); health: file to check (default: NODE_LEASE_FILE, else run's default)", func(s *settings, v string) error {
		s.leaseFile = v
		return nil
	}},
	{"metrics-addr", "NODEID_METRICS_ADDR", "", "serve /healthz, /readyz and /metrics on this address, e.g. :9600", func(s *settings, v string) error {
		s.metricsAddr = v
		if v == "" {
			return nil
		}
		_, _, err := net.SplitHostPort(v)
		return err
	}},
	{"log-format", "NODEID_LOG_FORMAT", "text", "json or text", func(s *settings, v string) error {
		if v != "json" && v != "text" {
			return fmt.Errorf("want json or text")
		}
		s.logFormat = v
		return nil
	}},
	{"log-level", "NODEID_LOG_LEVEL", "info", "debug, info, warn or error", func(s *settings, v string) error {
		return s.logLevel.UnmarshalText([]byte(v))
	}},
	{"endpoint", "NODEID_S3_ENDPOINT", "", "S3 endpoint URL, http:// or https:// (default: AWS_ENDPOINT_URL_S3, else AWS)", func(s *settings, v string) error {
		s.endpoint = v
		return checkEndpoint(v)
	}},
	{"region", "NODEID_S3_REGION", "", "S3 region (default: AWS_REGION, else us-east-1)", func(s *settings, v string) error {
		s.region = v
		return nil
	}},
	{"s3-path-style", "NODEID_S3_PATH_STYLE", "false", "path-style addressing, as most S3-compatible servers need", func(s *settings, v string) error {
		return parseBool(v, &s.pathStyle)
	}},
	{"skip-probe", "NODEID_SKIP_PROBE", "false", "do not check at start that the endpoint enforces conditional writes", func(s *settings, v string) error {
		return parseBool(v, &s.skipProbe)
	}},
	{"advertise-address", "NODEID_ADVERTISE_ADDRESS", "", "where peers reach this task, host or host:port, published in the lease (default: the ECS task's private IPv4, else the host's primary address)", func(s *settings, v string) error {
		s.advertiseAddress = v
		if v == "" {
			return nil
		}
		return nodeid.ValidateAddress(v)
	}},
	{"peers-file", "NODEID_PEERS_FILE", "", "run: JSON file kept current with the peers table, for the command (default: the lease file's name with -peers.json, beside it)", func(s *settings, v string) error {
		s.peersFile = v
		return nil
	}},
	{"template", "NODEID_TEMPLATES", "", "run: SRC:DST, a Go text/template rendered to DST before the command starts; repeatable (variable: comma-separated)", func(s *settings, v string) error {
		var err error
		s.templates, err = parseTemplates(v)
		return err
	}},
}

// repeatable options may be given more than once; their values are joined
// with commas, the form their variable takes.
var repeatable = map[string]bool{"template": true}

// listFlag collects the values of a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// Bounds of the settings, documented in docs/cli.md ("Bounds"); a value
// outside them exits 2. S3's Last-Modified has a resolution of 1 s, and
// waiters judge expiry by it: a shorter lease could not be told from an
// expired one.
const (
	maxClusterSize   = 1024
	minLeaseDuration = time.Second
	maxLeaseDuration = time.Hour
	minInterval      = 100 * time.Millisecond
)

// flagOnly are the options a command takes from its flag alone, never from
// the variable: a NODEID_CLUSTER_SIZE left in the shell must not resize a
// cluster (see explicitSize).
var flagOnly = map[string]map[string]bool{
	"scale":     {"cluster-size": true},
	"bootstrap": {"cluster-size": true},
}

// boolOptions are the options given as bare flags (--skip-probe), like
// Go's flag package booleans; --skip-probe=false works too.
var boolOptions = map[string]bool{"s3-path-style": true, "skip-probe": true}

// boolValue is a flag.Value that the flag package treats as a boolean: a
// bare flag sets "true". The text is checked later, with the variable's.
type boolValue struct{ v string }

func (b *boolValue) String() string     { return b.v }
func (b *boolValue) Set(v string) error { b.v = v; return nil }
func (b *boolValue) IsBoolFlag() bool   { return true }

// synopses are the usage lines of the commands whose arguments are not just
// flags.
var synopses = map[string]string{
	"run":       "[flags] -- CMD [ARGS...]",
	"release":   "--node N --force [flags]",
	"scale":     "--cluster-size N [--dry-run] [--yes] [flags]",
	"bootstrap": "--cluster-size N [--dry-run] [--yes] [flags]",
}

// printCommandHelp is what `nodeid-init CMD -h` and `nodeid-init help CMD`
// print (on stdout).
func printCommandHelp(w io.Writer, cmd string, fs *flag.FlagSet) {
	synopsis := synopses[cmd]
	if synopsis == "" {
		synopsis = "[flags]"
	}
	fmt.Fprintf(w, "usage: nodeid-init %s %s\n", cmd, synopsis)
	for _, c := range commands() {
		if c.name == cmd {
			fmt.Fprintf(w, "\n%s\n", c.summary)
		}
	}
	fmt.Fprintf(w, "\nflags (each also from its NODEID_* variable; the flag wins; see docs/cli.md):\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// parseSettings reads the named options from the environment, then flags.
// extra defines subcommand flags that have no variable. -h prints the
// command's help on helpOut (stdout) and returns errHelp.
func parseSettings(ctx context.Context, cmd string, args []string, helpOut io.Writer, names []string, extra func(fs *flag.FlagSet, s *settings)) (*settings, []string, error) {
	s := &settings{logLevel: slog.LevelInfo, sources: map[string]string{}, explicit: map[string]bool{}}
	fs := flag.NewFlagSet("nodeid-init "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	values := map[string]func() string{}
	lists := map[string]*listFlag{}
	var opts []option
	for _, o := range options {
		for _, n := range names {
			if n == o.flag {
				opts = append(opts, o)
				usage := fmt.Sprintf("%s (env %s", o.usage, o.env)
				if flagOnly[cmd][o.flag] {
					usage = fmt.Sprintf("%s (required, on the command line only: %s is ignored here", o.usage, o.env)
				}
				if o.def != "" {
					usage += ", default " + o.def
				}
				switch {
				case repeatable[o.flag]:
					l := &listFlag{}
					lists[o.flag] = l
					fs.Var(l, o.flag, usage+")")
					values[o.flag] = l.String
				case boolOptions[o.flag]:
					b := &boolValue{}
					fs.Var(b, o.flag, usage+")")
					values[o.flag] = b.String
				default:
					p := fs.String(o.flag, "", usage+")")
					values[o.flag] = func() string { return *p }
				}
			}
		}
	}
	if extra != nil {
		extra(fs, s)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printCommandHelp(helpOut, cmd, fs)
			return nil, nil, errHelp
		}
		return nil, nil, usagef("%v (see nodeid-init %s -h)", err, cmd)
	}
	setByFlag := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { setByFlag[f.Name] = true })
	s.explicit = setByFlag
	// The log format is known from here on: the final error line follows it.
	for _, o := range opts {
		v, source := o.def, "default"
		if e := os.Getenv(o.env); e != "" { // an empty variable counts as unset
			v, source = e, o.env
		}
		if setByFlag[o.flag] {
			v, source = values[o.flag](), "--"+o.flag
		}
		s.sources[o.flag] = source
		if o.flag == "log-format" {
			invocationOf(ctx).setLogFormat(strings.TrimSpace(v))
		}
		if boolOptions[o.flag] {
			if err := parseBool(strings.TrimSpace(v), nil); err != nil {
				return nil, nil, usagef("invalid %s %q: %s", source, v, err)
			}
		}
		if err := o.set(s, strings.TrimSpace(v)); err != nil {
			return nil, nil, usagef("invalid %s %q: %s", source, v, strings.TrimPrefix(oneLine(err), nodeid.ErrInvalidConfig.Error()+": "))
		}
	}
	return s, fs.Args(), nil
}

// parseDurationIn parses a duration within [lo, hi] (hi 0: no upper bound);
// empty is 0, the option's own default.
func parseDurationIn(v string, lo, hi time.Duration, dst *time.Duration) error {
	if v == "" {
		*dst = 0
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("not a duration (e.g. 15s, 500ms)")
	}
	switch {
	case d < 0:
		return fmt.Errorf("negative duration")
	case d < lo:
		if lo == minLeaseDuration {
			return fmt.Errorf("must be at least %v (S3's Last-Modified has a resolution of 1s)", lo)
		}
		return fmt.Errorf("must be at least %v", lo)
	case hi > 0 && d > hi:
		return fmt.Errorf("must be at most %v", hi)
	}
	*dst = d
	return nil
}

// parseIntIn parses an integer within [lo, hi]; empty leaves dst alone.
func parseIntIn(v string, lo, hi int, dst *int) error {
	if v == "" {
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("not an integer")
	}
	if n < lo || n > hi {
		return fmt.Errorf("must be %d..%d", lo, hi)
	}
	*dst = n
	return nil
}

func parseBool(v string, dst *bool) error {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return fmt.Errorf("not a boolean (true or false)")
	}
	if dst != nil {
		*dst = b
	}
	return nil
}

// checkEndpoint refuses an endpoint the SDK could only fail on at the first
// request: it must be an absolute http:// or https:// URL with a host.
func checkEndpoint(v string) error {
	if v == "" {
		return nil
	}
	const want = "want an http:// or https:// URL, e.g. https://s3.eu-west-1.amazonaws.com or http://127.0.0.1:7070"
	u, err := url.Parse(v)
	if err != nil || !strings.Contains(v, "://") {
		return errors.New(want)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return errors.New(want)
	}
	return nil
}

// parseIDList parses "0,2,4" and "0-5" (and mixtures).
func parseIDList(v string) ([]int, error) {
	if v == "" {
		return nil, nil
	}
	seen := map[int]bool{}
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("%q is not a node ID", part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("%q is not a range of node IDs", part)
			}
		}
		if b-a > 100000 {
			return nil, fmt.Errorf("range %q too large", part)
		}
		for id := a; id <= b; id++ {
			seen[id] = true
		}
	}
	ids := make([]int, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids, nil
}

func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// requireBucket and requireClusterSize are checked by the commands that need them.
func (s *settings) requireBucket() error {
	if s.bucket == "" {
		return usagef("no bucket: set --bucket or NODEID_BUCKET")
	}
	return nil
}

func (s *settings) requireClusterSize() error {
	if s.clusterSize < 1 {
		return usagef("no cluster size: set --cluster-size or NODEID_CLUSTER_SIZE")
	}
	return nil
}

// checkDataRoot verifies, without writing, that the data root is a writable
// directory.
func (s *settings) checkDataRoot() error {
	if s.dataRoot == "" {
		return nil
	}
	if err := checkPathText("data root", s.dataRoot); err != nil {
		return err
	}
	fi, err := os.Stat(s.dataRoot)
	if err != nil {
		return usagef("data root %s: %v", s.dataRoot, errors.Unwrap(err))
	}
	if !fi.IsDir() {
		return usagef("data root %s is not a directory", s.dataRoot)
	}
	if err := unix.Access(s.dataRoot, unix.W_OK|unix.X_OK); err != nil {
		return usagef("data root %s is not writable: %v", s.dataRoot, err)
	}
	return nil
}

// checkPathText refuses control characters (newlines included) and invalid
// UTF-8 in a path that ends up in the env file, a log line or a child's
// environment: a newline there would start a new variable in the env file.
// Spaces, quotes and other printable characters are fine (they are quoted).
func checkPathText(what, path string) error {
	if !utf8.ValidString(path) {
		return usagef("%s %q: not valid UTF-8", what, path)
	}
	for _, r := range path {
		if unicode.IsControl(r) {
			return usagef("%s %q: control characters are not allowed", what, path)
		}
	}
	return nil
}

// checkWritableFile verifies, without writing, that path can be created or
// replaced.
func checkWritableFile(what, path string) error {
	if err := checkPathText(what, path); err != nil {
		return err
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return usagef("%s %s: directory %s does not exist", what, path, dir)
	}
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return usagef("%s %s: directory %s is not writable", what, path, dir)
	}
	if fi, err := os.Stat(path); err == nil {
		if fi.IsDir() {
			return usagef("%s %s is a directory", what, path)
		}
		if err := unix.Access(path, unix.W_OK); err != nil {
			return usagef("%s %s is not writable", what, path)
		}
	}
	return nil
}

// outputFile is one file nodeid-init writes, for checkDistinctOutputs.
type outputFile struct{ what, path string }

// checkDistinctOutputs refuses two outputs that are one file: by clean path,
// or, for files that exist, by identity (a symlink or a hard link). Each is
// rewritten by rename, so the last writer would silently replace the other
// (a peers table where the lease file should be, a config file replaced by
// JSON).
func checkDistinctOutputs(outs ...outputFile) error {
	for i, a := range outs {
		if a.path == "" {
			continue
		}
		ai, aerr := os.Stat(a.path)
		for _, b := range outs[i+1:] {
			if b.path == "" {
				continue
			}
			same := filepath.Clean(a.path) == filepath.Clean(b.path)
			if !same && aerr == nil {
				if bi, err := os.Stat(b.path); err == nil {
					same = os.SameFile(ai, bi)
				}
			}
			if same {
				return usagef("%s and %s are the same file (%s): give each its own path", a.what, b.what, b.path)
			}
		}
	}
	return nil
}

func (s *settings) logger(stderr io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: s.logLevel}
	if s.logFormat == "json" {
		// Durations as Go duration strings ("1.5s"), not nanoseconds.
		opts.ReplaceAttr = func(_ []string, a slog.Attr) slog.Attr {
			if a.Value.Kind() == slog.KindDuration {
				return slog.String(a.Key, a.Value.Duration().String())
			}
			return a
		}
		return slog.New(slog.NewJSONHandler(stderr, opts))
	}
	return slog.New(slog.NewTextHandler(stderr, opts))
}

// warnPrefix warns about a prefix that does not end with '/': keys are then
// <prefix>0.json, e.g. zeebe-prod0.json, which is allowed but rarely meant.
func (s *settings) warnPrefix(log *slog.Logger) {
	if s.prefix != "" && !strings.HasSuffix(s.prefix, "/") {
		log.Warn("the prefix does not end with '/': lease objects are "+s.prefix+"0.json, "+s.prefix+"1.json, ...; add the '/' unless that is meant",
			"prefix", s.prefix)
	}
}

// providerConfig builds and validates the library configuration, so timing
// mistakes are reported before anything is read or written.
func (s *settings) providerConfig(log *slog.Logger) (nodeid.Config, error) {
	cfg := nodeid.Config{
		TaskID:           s.taskID,
		ClusterSize:      s.clusterSize,
		AllowedIDs:       s.allowedIDs,
		LeaseDuration:    s.leaseDuration,
		RenewInterval:    s.renewInterval,
		AcquireTimeout:   s.acquireTimeout,
		PollInterval:     s.pollInterval,
		ReadinessTimeout: s.readinessTimeout,
		Logger:           log,
	}
	if cfg.TaskID == "" {
		cfg.TaskID = "placeholder" // resolved later; validated for the rest now
	}
	p, err := nodeid.NewProvider(noRepository{}, cfg)
	if err != nil {
		return nodeid.Config{}, usagef("%s", strings.TrimPrefix(err.Error(), nodeid.ErrInvalidConfig.Error()+": "))
	}
	cfg = p.Config()
	cfg.TaskID = s.taskID
	return cfg, nil
}

// noRepository lets providerConfig validate without storage.
type noRepository struct{ nodeid.Repository }

// repository connects to S3. It reads nothing yet. The SDK's own log lines
// go through log.
func (s *settings) repository(ctx context.Context, log *slog.Logger) (*nodeid.S3Repository, error) {
	if s.endpoint == "" {
		for _, v := range []string{"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"} {
			if e := strings.TrimSpace(os.Getenv(v)); e != "" {
				if err := checkEndpoint(e); err != nil {
					return nil, usagef("invalid %s %q: %v", v, e, err)
				}
				break
			}
		}
	}
	s.warnPrefix(log)
	client, err := nodeid.NewS3Client(ctx, nodeid.S3Config{Endpoint: s.endpoint, Region: s.region, PathStyle: s.pathStyle, Logger: log})
	if err != nil {
		return nil, usagef("%v", err)
	}
	timeout := nodeid.DefaultRequestTimeout
	if s.renewInterval > 0 {
		timeout = min(timeout, s.renewInterval)
	}
	return nodeid.NewS3Repository(client, s.bucket, s.prefix, timeout)
}

// probe checks the endpoint unless told not to.
func (s *settings) probe(ctx context.Context, repo *nodeid.S3Repository, log *slog.Logger) error {
	if s.skipProbe {
		log.Warn("conditional-write probe skipped (--skip-probe)")
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := repo.Probe(ctx); err != nil {
		return err
	}
	log.Debug("endpoint enforces conditional writes")
	return nil
}

var s3Options = []string{"bucket", "prefix", "endpoint", "region", "s3-path-style", "log-format", "log-level"}
