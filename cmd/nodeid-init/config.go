package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

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
	fsTimeout        time.Duration // 0: defaultFSTimeout
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
				if only := flagOnly[cmd][o.flag]; only != "" {
					usage = fmt.Sprintf("%s (%s: %s is ignored here", o.usage, only, o.env)
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

// warnRootLeases warns when the bucket root holds Camunda's (or an
// unprefixed nodeid cluster's) marker while a prefix is configured: nodeid
// would then bootstrap a second, independent lease set under the prefix and
// hand out IDs the root's brokers hold too (docs/migration.md, condition 4).
// One LIST at start-up; a failure (e.g. a policy without s3:ListBucket)
// only skips the check.
func (s *settings) warnRootLeases(ctx context.Context, repo *nodeid.S3Repository, log *slog.Logger) {
	if s.prefix == "" {
		return
	}
	found, err := repo.MarkerAt(ctx, "")
	if err != nil {
		log.Debug("could not check the bucket root for another lease set", "err", err)
		return
	}
	if found {
		log.Warn("the bucket root holds "+nodeid.MarkerKeyName+" (a lease set without a prefix, e.g. Camunda's) but the prefix is "+s.prefix+
			": this makes a second, independent lease set; unset the prefix to take over the root's leases (docs/migration.md)",
			"root_prefix", "", "prefix", s.prefix)
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
	cfg = cfg.WithDefaults()
	validate := cfg.Validate
	if cfg.TaskID == "" {
		validate = cfg.ValidateExceptTaskID // resolved later; validated for the rest now
	}
	if err := validate(); err != nil {
		return nodeid.Config{}, usagef("%s", strings.TrimPrefix(err.Error(), nodeid.ErrInvalidConfig.Error()+": "))
	}
	return cfg, nil
}

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
