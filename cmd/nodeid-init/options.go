package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nodeid/nodeid/datadir"
	"github.com/nodeid/nodeid/nodeid"
)

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
	{"lease-duration", "NODEID_LEASE_DURATION", nodeid.DefaultLeaseDuration.String(), "lease duration L (1s..1h)", func(s *settings, v string) error {
		return parseDurationIn(v, minLeaseDuration, maxLeaseDuration, &s.leaseDuration)
	}},
	{"renew-interval", "NODEID_RENEW_INTERVAL", "", "renew interval (default L/3; at least 100ms)", func(s *settings, v string) error {
		return parseDurationIn(v, minInterval, maxLeaseDuration, &s.renewInterval)
	}},
	{"acquire-timeout", "NODEID_ACQUIRE_TIMEOUT", "", "give up acquiring after this long (default: wait forever); exit 5", func(s *settings, v string) error {
		return parseDurationIn(v, 0, 0, &s.acquireTimeout)
	}},
	{"poll-interval", "NODEID_POLL_INTERVAL", nodeid.DefaultPollInterval.String(), "while every ID is held, list the leases again at least this often (100ms..1h)", func(s *settings, v string) error {
		return parseDurationIn(v, minInterval, maxLeaseDuration, &s.pollInterval)
	}},
	{"spare-list-interval", "NODEID_SPARE_LIST_INTERVAL", "", "while waiting, list the leases this often and otherwise only read the release hint each poll (default R; the poll interval lists at every poll)", func(s *settings, v string) error {
		return parseDurationIn(v, minInterval, maxLeaseDuration, &s.spareListInterval)
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
	{"fs-timeout", "NODEID_FS_TIMEOUT", "", "bound of each file-system phase on the data root (start-up checks, prepare, GC, the stop sequence's syncfs): past it the task exits 7 and leaves its lease to expire (default 4L, at least 30s; 1s..1h)", func(s *settings, v string) error {
		return parseDurationIn(v, time.Second, maxLeaseDuration, &s.fsTimeout)
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
	{"s3-endpoint", "NODEID_S3_ENDPOINT", "", "S3 endpoint URL, http:// or https:// (default: AWS_ENDPOINT_URL_S3, else AWS)", func(s *settings, v string) error {
		s.endpoint = v
		return checkEndpoint(v)
	}},
	{"s3-region", "NODEID_S3_REGION", "", "S3 region (default: AWS_REGION, else us-east-1)", func(s *settings, v string) error {
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
	{"template", "NODEID_TEMPLATE", "", "run: SRC:DST, a Go text/template rendered to DST before the command starts; repeatable (variable: comma-separated)", func(s *settings, v string) error {
		var err error
		s.templates, err = parseTemplates(v)
		return err
	}},
}

// envName is the variable of the option whose flag is --name: one rule for
// every option (--foo-bar is NODEID_FOO_BAR), checked by the tests.
func envName(flag string) string {
	return "NODEID_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// oldName is the name an option had before it followed envName's rule. It
// is still read: the new name wins, and both set to different values is an
// error, so a rename never silently changes which value is used.
type oldName struct{ flag, env string }

// oldNames maps an option's flag to its old names (docs/cli.md, "Old names").
var oldNames = map[string]oldName{
	"s3-endpoint": {flag: "endpoint"},
	"s3-region":   {flag: "region"},
	"template":    {env: "NODEID_TEMPLATES"},
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
// the variable, with how its help says so: a NODEID_CLUSTER_SIZE left in
// the shell must not resize a cluster (see explicitSize), nor let release
// create an object outside it (see releaseInCluster).
var flagOnly = map[string]map[string]string{
	"scale":     {"cluster-size": "required, on the command line only"},
	"bootstrap": {"cluster-size": "required, on the command line only"},
	"release":   {"cluster-size": "on the command line only"},
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

// s3Options are the settings of every command that connects to S3.
var s3Options = []string{"bucket", "prefix", "s3-endpoint", "s3-region", "s3-path-style", "log-format", "log-level"}
