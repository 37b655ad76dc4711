package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
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
	bucket, prefix string
	clusterSize    int
	leaseDuration  time.Duration
	renewInterval  time.Duration
	acquireTimeout time.Duration
	pollInterval   time.Duration
	// spareListInterval: a waiting task's listing interval; 0 = R.
	spareListInterval time.Duration
	readinessTimeout  time.Duration
	stopTimeout       time.Duration
	allowedIDs        []int
	taskID            string
	dataRoot          string
	keepVersions      int
	dataWorkers       int
	fsTimeout         time.Duration // 0: defaultFSTimeout
	immutable, skip   []string
	dataRules         datadir.CopyRules
	envFile           string
	handoffFile       string
	leaseFile         string
	metricsAddr       string
	logFormat         string
	logLevel          slog.Level
	endpoint, region  string
	pathStyle         bool
	skipProbe         bool
	advertiseAddress  string
	peersFile         string
	templates         []*templateSpec
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
	// define adds the flag name of the option opt (its own name, or an
	// old one).
	define := func(name, opt, usage string) {
		switch {
		case repeatable[opt]:
			l := &listFlag{}
			fs.Var(l, name, usage)
			values[name] = l.String
		case boolOptions[opt]:
			b := &boolValue{}
			fs.Var(b, name, usage)
			values[name] = b.String
		default:
			p := fs.String(name, "", usage)
			values[name] = func() string { return *p }
		}
	}
	var opts []option
	for _, o := range options {
		for _, n := range names {
			if n == o.flag {
				opts = append(opts, o)
				usage := fmt.Sprintf("%s (env %s", o.usage, o.env)
				if only := flagOnly[cmd][o.flag]; only != "" {
					usage = fmt.Sprintf("%s (%s: %s is ignored here", o.usage, only, o.env)
				}
				old := oldNames[o.flag]
				if old.env != "" {
					usage += ", old name env " + old.env
				}
				if o.def != "" {
					usage += ", default " + o.def
				}
				define(o.flag, o.flag, usage+")")
				if old.flag != "" {
					define(old.flag, o.flag, "old name of --"+o.flag)
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
	// Also before a bad setting's error: it may be the consequence.
	defer warnUnknownVariables(invocationOf(ctx), s, os.Environ())
	invocationOf(ctx).setSettings(s)
	setByFlag := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { setByFlag[f.Name] = true })
	s.explicit = map[string]bool{}
	for name := range setByFlag {
		s.explicit[name] = true
	}
	// The log format is known from here on: the final error line follows it.
	for _, o := range opts {
		old := oldNames[o.flag]
		v, source := o.def, "default"
		// An empty variable counts as unset.
		newEnv, oldEnv := os.Getenv(o.env), ""
		if old.env != "" {
			oldEnv = os.Getenv(old.env)
		}
		if e, src, err := pickName(o.env, newEnv, newEnv != "", old.env, oldEnv, oldEnv != "", "="); err != nil {
			return nil, nil, err
		} else if src != "" {
			v, source = e, src
		}
		newFlag, oldFlag := "", ""
		if setByFlag[o.flag] {
			newFlag = values[o.flag]()
		}
		if old.flag != "" && setByFlag[old.flag] {
			oldFlag = values[old.flag]()
			s.explicit[o.flag] = true
		}
		if f, src, err := pickName("--"+o.flag, newFlag, setByFlag[o.flag], "--"+old.flag, oldFlag, old.flag != "" && setByFlag[old.flag], " "); err != nil {
			return nil, nil, err
		} else if src != "" {
			v, source = f, src
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

// pickName chooses between an option's name and its old name (flags or
// variables; sep joins a name and its value in messages): the one that is
// set, the new one if both are and agree. Both set to different values is
// an error: after a rename, the value meant cannot be guessed. The source
// is "" when neither is set.
func pickName(name, v string, set bool, oldName, oldV string, oldSet bool, sep string) (value, source string, err error) {
	switch {
	case set && oldSet && strings.TrimSpace(v) != strings.TrimSpace(oldV):
		return "", "", usagef("%s%s%q and its old name %s%s%q disagree: set only %s", name, sep, v, oldName, sep, oldV, name)
	case set:
		return v, name, nil
	case oldSet:
		return oldV, oldName, nil
	}
	return "", "", nil
}

// warnUnknownVariables logs one warning per NODEID_* variable that no
// option reads: a misspelt name (NODEID_CLUSTERSIZE) would otherwise be
// ignored silently and show up only as a missing setting. Written at once,
// bounded, in the format of the final error line: an error about the
// missing setting may follow before any logger exists.
func warnUnknownVariables(inv *invocation, s *settings, environ []string) {
	warnings := unknownVariables(environ)
	if inv.stderr == nil || len(warnings) == 0 {
		return
	}
	var buf strings.Builder
	ls := &settings{logLevel: s.logLevel}
	if inv.json() {
		ls.logFormat = "json"
	}
	log := ls.logger(&buf)
	for _, w := range warnings {
		log.Warn(w)
	}
	writeBounded(inv.stderr, strings.TrimSuffix(buf.String(), "\n"))
}

// testVariables are read by the project's tests and test builds, not by an
// option: no warning for them.
var testVariables = map[string]bool{"NODEID_SKIP_INTEGRATION": true, "NODEID_VERSITYGW": true}

// unknownVariables returns the warnings for the NODEID_* variables of
// environ that no option reads, by name, each with the closest known
// variable when one is close.
func unknownVariables(environ []string) []string {
	known := map[string]bool{}
	var names []string
	for _, o := range options {
		known[o.env] = true
		names = append(names, o.env)
	}
	for _, old := range oldNames {
		if old.env != "" {
			known[old.env] = true
		}
	}
	var out []string
	seen := map[string]bool{}
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "NODEID_") || known[name] || seen[name] || testVariables[name] || strings.HasPrefix(name, "NODEID_TEST_") {
			continue
		}
		seen[name] = true
		w := "unknown variable " + name + " ignored"
		if m := closest(name, names); m != "" {
			w += "; did you mean " + m + "?"
		}
		out = append(out, w)
	}
	sort.Strings(out)
	return out
}

// closest returns the name of names nearest to v by edit distance, if it
// is near enough to be a misspelling: at most 3 edits, or a third of the
// name's own part for long names (NODEID_ENDPOINT is 3 from
// NODEID_S3_ENDPOINT).
func closest(v string, names []string) string {
	best, bestD := "", -1
	for _, n := range names {
		if d := editDistance(v, n); bestD < 0 || d < bestD {
			best, bestD = n, d
		}
	}
	if bestD < 0 || bestD > max(3, (len(v)-len("NODEID_"))/3) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance of a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
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
	// Every duration is a number of seconds under a key that says so
	// (took_seconds), in both formats: one key, one type, whatever logged
	// it. Our own lines log them so already; this catches the rest.
	opts := &slog.HandlerOptions{Level: s.logLevel, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Value.Kind() == slog.KindDuration {
			key := a.Key
			if !strings.HasSuffix(key, "_seconds") {
				key += "_seconds"
			}
			return slog.Float64(key, a.Value.Duration().Seconds())
		}
		return a
	}}
	if s.logFormat == "json" {
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
	// A spare reads the release hint each poll and lists every R: a
	// graceful release is still taken within P, a crashed holder's expired
	// lease up to R later (docs/operations.md).
	cfg.SpareListInterval = s.spareListInterval
	if cfg.SpareListInterval == 0 {
		cfg.SpareListInterval = cfg.RenewInterval
	}
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
