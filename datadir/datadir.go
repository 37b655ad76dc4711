// Package datadir prepares versioned data directories on shared storage.
//
// A task that holds node N under version K works in <root>/node-N/vK. The
// version is the fencing token of the lease: a holder that lost its lease
// without noticing may keep writing into its own directory, so its successor
// never uses that directory. Instead, Prepare creates a fresh vK from the
// newest earlier version that was completely prepared, and marks it complete
// with a marker file written last. A directory without a valid marker is
// never used; it is removed only if it is positively this cluster's own
// leftover (see PreparingName), and anything else is left in place.
//
// Files are hard-linked where sharing them cannot hurt: all files when the
// previous holder released its lease gracefully (it has stopped writing),
// otherwise only files matching Options.Immutable or Options.Rules (for
// example the zeebe preset, Camunda 8.9's own rules). Everything else is copied,
// because a stale holder may still write it.
package datadir

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeid/nodeid/node"
)

// Errors returned by Prepare and Collect, wrapped with details; test them
// with errors.Is.
var (
	// ErrInvalid reports invalid options or an invalid node instance. It is
	// returned before anything on disk is touched.
	ErrInvalid = errors.New("datadir: invalid argument")
	// ErrRoot reports a root that is missing, not a directory or not writable.
	ErrRoot = errors.New("datadir: unusable root")
	// ErrVersionUsed reports that the target version already holds a valid
	// marker, or is being prepared (or was left unfinished) by another
	// holder of it (see Options.Tenure). A version is handed out once;
	// seeing it again means that two tasks believe they hold the same
	// version, and at most one may proceed.
	ErrVersionUsed = errors.New("datadir: version already initialized")
	// ErrNewerVersion reports a valid version above the target: the lease's
	// version went backwards (its object deleted or reset), and preparing
	// would start the node from older data and then collect the newer.
	ErrNewerVersion = errors.New("datadir: a newer version is already initialized")
	// ErrUnrecognized reports a version directory that is neither valid nor
	// positively this cluster's own leftover, where Prepare would have to
	// remove it or might skip newer data by ignoring it. It is left alone.
	ErrUnrecognized = errors.New("datadir: unrecognized version directory")
	// ErrForeignCluster reports a data root that belongs to another cluster.
	ErrForeignCluster = errors.New("datadir: data root belongs to another cluster")
	// ErrUnsafeSymlink reports a symbolic link that is absolute or resolves
	// outside the version directory that holds it.
	ErrUnsafeSymlink = errors.New("datadir: symlink leaves the data directory")
	// ErrValidation reports a copy that does not match its source. The target
	// is left without a marker, so the next Prepare redoes it.
	ErrValidation = errors.New("datadir: copy does not match its source")
)

// MarkerName is the file, at the top of a version directory, whose presence
// and content make the directory valid.
const MarkerName = "directory-initialized.json"

const (
	defaultKeep             = 2
	defaultDirMode          = fs.FileMode(0o750)
	defaultProgressInterval = 5 * time.Second
	defaultWorkers          = 32
	markerMode              = fs.FileMode(0o640)
)

// Options configure Prepare, and Collect (Keep, Cluster, Logger). The zero
// value is usable: copy everything except the marker, keep two versions,
// create directories 0750, no ownership check.
type Options struct {
	// PreviousGraceful reports that the previous holder released its lease
	// gracefully and so no longer writes into its directory. Every file is
	// then hard-linked instead of copied.
	PreviousGraceful bool

	// Immutable lists patterns of files that are never modified after they
	// are written (for example "snapshots/**"). They are hard-linked even
	// after an ungraceful takeover, unless the file has another name
	// (st_nlink > 1) through which a stale holder might write. Patterns
	// are slash-separated paths relative to the version directory; each
	// segment is a path.Match pattern, and "**" matches any number of
	// segments.
	Immutable []string

	// Skip lists patterns (same syntax) of files and directories that are not
	// carried over, for example "runtime/**" or "**/*.lock". A matching
	// directory is skipped with everything below it.
	Skip []string

	// SettleTime guards the files that Immutable and Rules share after an
	// ungraceful takeover: such a file is hard-linked only if its mtime and
	// ctime are older than SettleTime before the new directory's
	// in-progress file was written (by the file system's clock, so no two
	// machines' clocks are compared), and copied
	// otherwise, since a file written recently may still be being written
	// by the stale holder. Zero means no guard; negative is invalid.
	// nodeid-init sets it to the lease duration.
	SettleTime time.Duration

	// Rules adds an application's copy rules to Skip and Immutable, for
	// example those of Preset(PresetZeebe). The zero value adds nothing.
	Rules CopyRules

	// VerifyContent makes validation compare every copied file byte by byte
	// with its source instead of only checking presence and size. It reads
	// both trees once more.
	VerifyContent bool

	// Keep is the number of valid versions that garbage collection keeps,
	// the current one included (1 keeps only the current one). Zero means
	// 2; negative is invalid.
	Keep int

	// DirMode is the permission of the node and version directories that
	// Prepare creates; zero means 0750. Copied subdirectories keep the mode
	// of their source. It must include owner rwx.
	DirMode fs.FileMode

	// Workers bounds the goroutines that list, copy, link and validate
	// concurrently; zero means 32. On EFS (NFS) every metadata operation
	// is a round trip of about a millisecond and they overlap; on a local
	// disk more workers neither help nor hurt much. A few work in one
	// directory at a time (the kernel serialises creates in a directory),
	// so a tree of few large directories gains less.
	Workers int

	// Logger receives progress and decisions; nil means slog.Default().
	Logger *slog.Logger

	// Cluster is the cluster this task belongs to (see Cluster). The zero
	// value skips the ownership check, so two clusters pointed at one root
	// would hard-link each other's files; set it whenever leases come from a
	// shared bucket. It is also named in the in-progress file, and only
	// leftovers naming it are removed.
	Cluster Cluster

	// Tenure identifies the holder of this version, for example its task
	// ID. It is written into the in-progress file, and a target left
	// unfinished is redone only by the same tenure: another holder of the
	// version may be preparing it right now. Empty matches nothing.
	Tenure string

	// ProgressInterval is how often progress (files and bytes done) is
	// logged during a copy; zero means 5s.
	ProgressInterval time.Duration
}

// Result describes what Prepare did.
type Result struct {
	// HasSource is false when no valid earlier version existed and the
	// directory was created empty; Source is meaningful only when true.
	HasSource bool
	Source    node.Version

	FilesCopied int64 // regular files copied
	BytesCopied int64
	FilesLinked int64 // regular files hard-linked
	BytesLinked int64
	Symlinks    int64 // symbolic links recreated
	Skipped     int64 // entries left out: the source's marker, Options.Skip matches, special files

	// Redone reports that the target existed as our own leftover of an
	// interrupted preparation (or empty) and was removed first.
	Redone bool

	// Removed lists the directories removed by garbage collection.
	Removed []string

	Duration time.Duration
}

// flushBeforeMarker is false only in the benchmark that compares the copy
// itself with cp -a, which flushes nothing.
var flushBeforeMarker = true

// config is Options validated and with defaults applied.
type config struct {
	graceful      bool
	settle        time.Duration
	settledBefore time.Time // the in-progress file's mtime minus settle; zero without a guard
	immutable     []pattern
	skip          []pattern
	rules         CopyRules
	verifyContent bool
	keep          int
	dirMode       fs.FileMode
	workers       int
	log           *slog.Logger
	progress      time.Duration
	cluster       Cluster
	tenure        string
}

func (o Options) config() (*config, error) {
	c := &config{
		graceful:      o.PreviousGraceful,
		settle:        o.SettleTime,
		rules:         CopyRules{SkipSegment: slices.Clone(o.Rules.SkipSegment), LinkAfterCrashSegment: slices.Clone(o.Rules.LinkAfterCrashSegment)},
		verifyContent: o.VerifyContent,
		keep:          o.Keep,
		dirMode:       o.DirMode,
		workers:       o.Workers,
		log:           o.Logger,
		progress:      o.ProgressInterval,
		cluster:       o.Cluster,
		tenure:        o.Tenure,
	}
	var err error
	if c.immutable, err = compilePatterns(o.Immutable); err != nil {
		return nil, fmt.Errorf("%w: Immutable: %w", ErrInvalid, err)
	}
	if c.skip, err = compilePatterns(o.Skip); err != nil {
		return nil, fmt.Errorf("%w: Skip: %w", ErrInvalid, err)
	}
	if err := c.rules.check(); err != nil {
		return nil, fmt.Errorf("%w: Rules: %w", ErrInvalid, err)
	}
	if c.keep, err = keepOrDefault(o.Keep); err != nil {
		return nil, err
	}
	switch {
	case c.dirMode == 0:
		c.dirMode = defaultDirMode
	case c.dirMode&^fs.ModePerm != 0:
		return nil, fmt.Errorf("%w: DirMode %v has bits other than permissions", ErrInvalid, o.DirMode)
	case c.dirMode&0o700 != 0o700:
		return nil, fmt.Errorf("%w: DirMode %v lacks owner rwx", ErrInvalid, o.DirMode)
	}
	if c.settle < 0 {
		return nil, fmt.Errorf("%w: SettleTime %v is negative", ErrInvalid, o.SettleTime)
	}
	switch {
	case c.workers == 0:
		c.workers = defaultWorkers
	case c.workers < 0:
		return nil, fmt.Errorf("%w: Workers %d is negative", ErrInvalid, o.Workers)
	}
	switch {
	case c.progress == 0:
		c.progress = defaultProgressInterval
	case c.progress < 0:
		return nil, fmt.Errorf("%w: ProgressInterval %v is negative", ErrInvalid, o.ProgressInterval)
	}
	if !c.cluster.set() && c.cluster.Prefix != "" {
		return nil, fmt.Errorf("%w: Cluster has a prefix but no bucket", ErrInvalid)
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	return c, nil
}

func keepOrDefault(keep int) (int, error) {
	switch {
	case keep == 0:
		return defaultKeep, nil
	case keep < 0:
		return 0, fmt.Errorf("%w: Keep %d is negative (minimum 1, 0 means %d)", ErrInvalid, keep, defaultKeep)
	}
	return keep, nil
}

func checkInstance(inst node.Instance) error {
	if inst.ID < 0 || inst.Version < 0 {
		return fmt.Errorf("%w: %v has a negative id or version", ErrInvalid, inst)
	}
	return nil
}

// Dir returns the directory of inst under root: <root>/node-<ID>/v<Version>.
func Dir(root string, inst node.Instance) string {
	return filepath.Join(root, nodeDirName(inst.ID), versionDirName(inst.Version))
}

func nodeDirName(id int) string            { return "node-" + strconv.Itoa(id) }
func versionDirName(v node.Version) string { return "v" + strconv.FormatInt(int64(v), 10) }

// parseVersionDirName accepts only the canonical form written by
// versionDirName ("v7", not "v07"), so one version has one directory.
func parseVersionDirName(name string) (node.Version, bool) {
	if len(name) < 2 || name[0] != 'v' || (len(name) > 2 && name[1] == '0') {
		return 0, false
	}
	for _, c := range name[1:] {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(name[1:], 10, 64)
	if err != nil {
		return 0, false
	}
	return node.Version(v), true
}

// Prepare returns the data directory of inst under root, creating it from the
// newest valid earlier version of the same node (or empty if there is none),
// and then removes old versions as Collect does.
//
// It refuses, touching nothing, when the data cannot be trusted to move
// forward: ErrVersionUsed if the directory is already initialized, or left
// unfinished by another tenure (a directory is prepared once, by the task
// that acquired the version; see Options.Tenure),
// ErrNewerVersion if a later version is (the lease's version went
// backwards), ErrUnrecognized if a directory it would have to remove or
// skip is not positively its own (see Collect), and ErrForeignCluster if
// Options.Cluster is set and the root belongs to another cluster. A root
// without an owner is claimed for Options.Cluster.
//
// The new directory holds PreparingName while it is being prepared, and the
// marker is written only after the copy is validated and flushed to storage,
// so a crash at any point leaves either a complete copy or a directory that
// the next Prepare or Collect recognises as its own leftover. After the
// marker the target is checked once more against what validation found, and
// the marker removed (ErrValidation) if entries went meanwhile: another
// provider's GC may have been deleting it.
//
// Garbage collection failures are logged, not returned: the directory is
// ready by then and a cleanup problem must not keep the node from starting.
func Prepare(ctx context.Context, root string, inst node.Instance, opts Options) (_ string, _ Result, err error) {
	start := time.Now()
	cfg, err := opts.config()
	if err != nil {
		return "", Result{}, err
	}
	if err := checkInstance(inst); err != nil {
		return "", Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return "", Result{}, err
	}
	rootDir, err := openRoot(root, true)
	if err != nil {
		return "", Result{}, err
	}
	defer rootDir.Close()
	log := cfg.log.With("node_id", inst.ID, "version", int64(inst.Version))
	nodeName, nodePath := nodeDirName(inst.ID), filepath.Join(root, nodeDirName(inst.ID))
	dir := Dir(root, inst)
	target := versionDirName(inst.Version)

	// Everything that can refuse is checked before anything is written.
	claim, err := checkOwner(rootDir, root, cfg.cluster)
	if err != nil {
		return "", Result{}, err
	}
	nodeDir, err := openNodeDir(rootDir, nodeName, 0, false)
	var p plan
	switch {
	case errors.Is(err, fs.ErrNotExist):
		nodeDir = nil
	case err != nil:
		return "", Result{}, err
	default:
		defer nodeDir.Close()
		if p, err = planPrepare(nodeDir.f, nodePath, inst.Version, cfg.cluster, cfg.tenure); err != nil {
			return "", Result{}, err
		}
		defer p.close()
	}

	if claim {
		// Another preparation of this cluster may claim it first; then
		// this one is not the claimer, and collects as usual.
		if claim, err = claimOwner(rootDir, root, cfg.cluster, log); err != nil {
			return "", Result{}, err
		}
	}
	if nodeDir == nil {
		if nodeDir, err = openNodeDir(rootDir, nodeName, cfg.dirMode, true); err != nil {
			return "", Result{}, err
		}
		defer nodeDir.Close()
	}
	var pre []string // removed before preparing
	if !claim {
		// Space held by our unfinished directories below the target (an
		// attempt that failed and could not clean up, a crash) could make
		// this copy fail too: GC would only remove them after it succeeded.
		pre = removeLeftoversBelow(nodeDir.f, nodePath, inst.Version, cfg.cluster, log)
	}
	var res Result
	if p.target.st == stateLeftover || p.target.st == stateEmpty || p.target.st == stateNoData {
		log.Warn("datadir: removing leftovers of an interrupted preparation", "dir", dir)
		if err := removeUnfinished(nodeDir.f, p.target); err != nil {
			if p.target.st != stateLeftover {
				// Judged empty, but something was written since (rmdir
				// refuses): another holder of this version is preparing it.
				return "", Result{}, fmt.Errorf("%w: %s changed since it was judged %s; another holder of this version is preparing it: %w",
					ErrVersionUsed, dir, p.target.why, err)
			}
			return "", Result{}, fmt.Errorf("datadir: removing leftovers %s: %w", dir, err)
		}
		res.Redone = true
	}

	dst, err := makeDir(nodeDir.f, target, cfg.dirMode, true)
	switch {
	case errors.Is(err, fs.ErrExist):
		// Created since it was judged: by another holder of this version.
		return "", Result{}, fmt.Errorf("%w: %s appeared after it was judged: another holder of this version is preparing it: %w",
			ErrVersionUsed, dir, err)
	case errors.Is(err, errNotFresh):
		// Ours was removed (judged empty) and made again after our mkdir.
		return "", Result{}, fmt.Errorf("%w: %s was removed and made again after our mkdir: another holder of this version is preparing it: %w",
			ErrVersionUsed, dir, err)
	case err != nil:
		return "", Result{}, fmt.Errorf("datadir: creating %s: %w", dir, err)
	}
	defer dst.Close()
	var (
		ours        *unix.Stat_t // our in-progress file, once created
		markerStart bool         // a marker there may be ours from here on
	)
	defer func() {
		// An empty target is redone by whoever judges it first: if ours was
		// removed, another holder of this version proceeds, and whatever
		// failed here must be a refusal, never an ordinary error.
		if err == nil || errors.Is(err, ErrVersionUsed) {
			return
		}
		if errors.Is(err, ErrSyncTimeout) {
			// Removing it would wait on the same server (and fsync).
			log.Warn("datadir: the failed target is left for the next preparation: the file system does not complete flushes", "dir", dir, "error", err)
			return
		}
		if why := takenOver(nodeDir.f, target, dst, ours, cfg.tenure, markerStart); why != "" {
			err = fmt.Errorf("%w: %s %s, by another holder of this version: %w", ErrVersionUsed, dir, why, err)
			return
		}
		// Positively ours and unfinished: remove it, so that a failed
		// attempt (ENOSPC, an unreadable file) does not hold space or pile
		// up. What cannot be removed now, the next Prepare or GC removes.
		if rerr := removeFailedTarget(nodeDir.f, target, inst.Version, cfg.cluster, dst, ours); rerr != nil {
			log.Warn("datadir: could not remove the failed target; the next preparation removes it", "dir", dir, "err", rerr)
		} else {
			log.Warn("datadir: removed the failed target", "dir", dir, "err", err)
		}
	}()
	if testHookAfterMkdir != nil {
		testHookAfterMkdir(dir)
	}
	switch err := writeInProgress(dst, inst.Version, cfg.cluster, cfg.tenure, false); {
	case errors.Is(err, fs.ErrExist):
		return "", Result{}, fmt.Errorf("%w: %s holds another holder's in-progress file: %w", ErrVersionUsed, dir, err)
	case err != nil:
		return "", Result{}, fmt.Errorf("datadir: marking %s as in progress: %w", dir, err)
	}
	if testHookAfterCreateIP != nil {
		testHookAfterCreateIP(dir)
	}
	// Our file as created: takenOver tells it from another holder's, and
	// SettleTime counts from its time stamp.
	var ip unix.Stat_t
	switch err := fstatat(int(dst.Fd()), PreparingName, &ip); {
	case errors.Is(err, fs.ErrNotExist):
		// Unlinked by another holder's redo (it judged it empty).
		return "", Result{}, fmt.Errorf("%w: %s: our in-progress file was removed, by another holder of this version: %w", ErrVersionUsed, dir, err)
	case err != nil:
		return "", Result{}, fmt.Errorf("datadir: %s: %w", dir, err)
	}
	ours = &ip
	if cfg.settle > 0 {
		// The cutoff counts from the in-progress file's own time stamp:
		// set by the same clock as the files it is compared with (on NFS
		// and EFS the server's), never by comparing ours with it.
		cfg.settledBefore = time.Unix(ip.Mtim.Unix()).Add(-cfg.settle)
	}

	var (
		from *node.Version
		t    *tree
	)
	if p.source.dir != nil {
		src := p.source.v
		res.HasSource, res.Source, from = true, src, &src
		log.Info("datadir: preparing from previous version", "source", int64(src), "graceful", cfg.graceful)
		before, err := readMarker(p.source.dir, src)
		if err != nil {
			return "", Result{}, fmt.Errorf("%w: source %s: %w", ErrValidation, p.source.name, err)
		}
		t = &tree{
			ctx: ctx, cfg: cfg, log: log, node: nodeDir.r,
			src: p.source.name, dst: target,
			srcDir: p.source.dir, dstDir: dst,
			dstPath: dir,
		}
		if err := t.copyAndValidate(&res); err != nil {
			return "", Result{}, err
		}
		// Validation compares with the source as it is now, which a stale
		// holder's GC may have half deleted; GC removes the marker first.
		if err := sourceStillValid(p.source, before); err != nil {
			return "", Result{}, err
		}
		// The copy keeps the source's top-level mode; restore ours.
		if err := dst.Chmod(cfg.dirMode); err != nil {
			return "", Result{}, fmt.Errorf("datadir: %w", err)
		}
	} else {
		log.Info("datadir: no valid previous version, starting empty")
	}

	// Everything below the marker must be durable before the marker is.
	if flushBeforeMarker {
		if err := syncTree(dst); err != nil {
			return "", Result{}, fmt.Errorf("datadir: flushing %s: %w", dir, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return "", Result{}, err
	}
	m := Marker{InitializedAt: time.Now().UTC(), Version: inst.Version, InitializedFrom: from}
	markerStart = true
	if err := writeMarker(dst, m); err != nil {
		return "", Result{}, fmt.Errorf("datadir: writing marker in %s: %w", dir, err)
	}
	if testHookAfterMarker != nil {
		testHookAfterMarker(dir)
	}
	// Another provider's GC (Camunda's) may have been deleting the target
	// while it was flushed: a marker over a torn copy is the one thing it
	// must never vouch for. The in-progress file is still there, so without
	// the marker the directory is our leftover again.
	if t != nil {
		if err := t.recheck(); err != nil {
			if !errors.Is(err, ErrValidation) {
				err = fmt.Errorf("datadir: checking %s again after its marker: %w", dir, err)
			}
			if rerr := unmark(dst); rerr != nil {
				return "", Result{}, fmt.Errorf("%w (removing the marker of %s failed too: %w)", err, dir, rerr)
			}
			return "", Result{}, err
		}
	}
	// Exactly one unlink of the in-progress file succeeds: ours, and the
	// directory is valid; or that of a later tenure's cleanup, which judged
	// it a leftover (our lease is over) and now owns its removal. Then the
	// marker must not stay over a directory being deleted.
	switch err := unlinkAt(dst, PreparingName); {
	case errors.Is(err, fs.ErrNotExist):
		if rerr := unmark(dst); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			log.Warn("datadir: cannot remove the marker of a directory taken for removal", "dir", dir, "err", rerr)
		}
		return "", Result{}, fmt.Errorf("%w: %s was taken for removal by a later tenure's cleanup while it was completed", ErrVersionUsed, dir)
	case err != nil:
		log.Warn("datadir: cannot remove the in-progress file", "dir", dir, "err", err)
	}

	p.close() // GC may remove the source
	if claim {
		// A root without an owner may be another cluster's (an earlier
		// release's, or Camunda's) still in use: delete nothing of it
		// until that cluster's next start has had the chance to refuse
		// the root (ErrForeignCluster) and stop us from claiming it.
		log.Info("datadir: garbage collection skipped until the next preparation: this one claimed the data root", "root", root)
	} else {
		removed, err := collect(ctx, nodeDir.f, nodePath, inst.Version, cfg.keep, cfg.cluster, log)
		// Newest first, as collect lists them.
		res.Removed = append(pre, removed...)
		slices.SortStableFunc(res.Removed, func(a, b string) int {
			va, _ := parseVersionDirName(filepath.Base(a))
			vb, _ := parseVersionDirName(filepath.Base(b))
			return cmp.Compare(vb, va)
		})
		if err != nil {
			log.Warn("datadir: garbage collection failed", "err", err)
		}
	}
	res.Duration = time.Since(start)
	var fromVersion any = "none"
	if res.HasSource {
		fromVersion = int64(res.Source)
	}
	log.Info("datadir: prepared", "dir", dir, "from_version", fromVersion,
		"files_copied", res.FilesCopied, "bytes_copied", res.BytesCopied,
		"files_linked", res.FilesLinked, "bytes_linked", res.BytesLinked,
		"removed", len(res.Removed), "duration", res.Duration)
	return dir, res, nil
}

// Collect removes old versions of inst's node. Below inst's version it
// removes valid versions beyond the newest keep (Options.Keep, zero means
// 2; inst's own version counts if valid), our own leftovers of interrupted
// preparations (an in-progress file naming the version and Options.Cluster)
// and directories without data (empty, or holding only an in-progress file
// that is empty or names Options.Cluster). Everything else is not positively ours and is left
// in place and logged: a marker it cannot read (perhaps a newer format), a
// directory without a marker or in-progress file of ours, a file or symlink
// named like a version. Nothing at or above inst's version is touched: a
// newer directory may be being prepared by the task that holds the node
// now. With Options.Cluster set, a root owned by another cluster is
// ErrForeignCluster, and one not claimed yet is left alone (logged, nothing
// removed): Collect never claims a root, and an unclaimed one may be another
// cluster's. It returns the removed directories.
func Collect(ctx context.Context, root string, inst node.Instance, opts Options) ([]string, error) {
	cfg, err := opts.config()
	if err != nil {
		return nil, err
	}
	if err := checkInstance(inst); err != nil {
		return nil, err
	}
	rootDir, err := openRoot(root, true)
	if err != nil {
		return nil, err
	}
	defer rootDir.Close()
	log := cfg.log.With("node_id", inst.ID, "version", int64(inst.Version))
	switch claim, err := checkOwner(rootDir, root, cfg.cluster); {
	case err != nil:
		return nil, err
	case claim:
		// Not claimed yet: it may be another cluster's, still in use.
		// Prepare claims it and deletes nothing then either.
		log.Warn("datadir: garbage collection skipped: the data root is not claimed by this cluster", "root", root, "cluster", cfg.cluster.String())
		return nil, nil
	}
	node, err := openNodeDir(rootDir, nodeDirName(inst.ID), 0, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer node.Close()
	return collect(ctx, node.f, filepath.Join(root, nodeDirName(inst.ID)), inst.Version, cfg.keep, cfg.cluster, log)
}

// openRoot checks root up front so that a misconfigured mount gives one clear
// error instead of a failure somewhere inside the copy. Only a caller that
// writes asks for a writable root.
func openRoot(root string, writable bool) (*os.Root, error) {
	if root == "" {
		return nil, fmt.Errorf("%w: empty path", ErrRoot)
	}
	fi, err := os.Stat(root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%w: %s does not exist", ErrRoot, root)
	case err != nil:
		return nil, fmt.Errorf("%w: %w", ErrRoot, err)
	case !fi.IsDir():
		return nil, fmt.Errorf("%w: %s is not a directory", ErrRoot, root)
	}
	if writable {
		if err := checkWritable(root); err != nil {
			return nil, fmt.Errorf("%w: %s is not writable: %w", ErrRoot, root, err)
		}
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRoot, err)
	}
	return r, nil
}

// nodeDir is <root>/node-N, opened once without following a symlink: f for
// the *at system calls, r (the same directory) for the copy.
type nodeDir struct {
	f *os.File
	r *os.Root
}

func (n *nodeDir) Close() {
	n.f.Close()
	n.r.Close()
}

// openNodeDir opens <root>/node-N. A symlink in its place is refused: it
// could point anywhere.
func openNodeDir(root *os.Root, name string, mode fs.FileMode, create bool) (*nodeDir, error) {
	rf, err := root.Open(".")
	if err != nil {
		return nil, fmt.Errorf("datadir: %w", err)
	}
	defer rf.Close()
	var f *os.File
	if create {
		f, err = makeDir(rf, name, mode, false)
		if errors.Is(err, fs.ErrExist) {
			err = nil
		}
	}
	if f == nil && err == nil {
		f, err = openDirAt(rf, name)
	}
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		// Linux reports a symlink opened with O_DIRECTORY|O_NOFOLLOW as
		// either.
		var st unix.Stat_t
		if fstatat(int(rf.Fd()), name, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return nil, fmt.Errorf("%w: %s is a symlink", ErrUnsafeSymlink, name)
		}
		return nil, fmt.Errorf("datadir: %s is not a directory", name)
	case err != nil:
		return nil, fmt.Errorf("datadir: %w", err)
	}
	r, err := openRootAt(root, name, f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("datadir: %w", err)
	}
	return &nodeDir{f: f, r: r}, nil
}

type dirState int

const (
	stateMissing   dirState = iota
	stateValid              // a directory with a valid marker
	stateLeftover           // ours, unfinished: no valid marker, our in-progress file (naming tenure)
	stateEmpty              // an empty directory: removing it loses nothing
	stateNoData             // only an in-progress file, empty or ours: a crash while writing it
	stateBadMarker          // a marker that cannot be read, not ours: perhaps valid in another format
	stateNotDir             // a symlink, file or anything else that is not a directory
	stateNotOurs            // a directory without a valid marker or an in-progress file of ours
)

// entry is a version directory as inspect judged it. dir is the directory
// itself, held open from the judgement to whatever is done with it, so
// that swapping the name for something else meanwhile changes nothing.
type entry struct {
	name   string
	v      node.Version
	st     dirState
	why    string      // what is wrong with a directory that is not valid
	tenure string      // stateLeftover: the tenure its in-progress file names
	dir    *os.File    // nil unless st is stateValid, stateLeftover, stateEmpty, stateNoData
	lone   unix.Stat_t // stateNoData: the in-progress file as judged
}

func (e *entry) close() {
	if e.dir != nil {
		e.dir.Close()
		e.dir = nil
	}
}

// inspect classifies the entry name of the node directory as the directory
// of version v. An error means the state could not be established (for
// example an I/O error reading the marker); callers then must not remove
// anything. The caller closes the entry.
func inspect(node *os.File, name string, v node.Version, c Cluster) (e entry, err error) {
	e = entry{name: name, v: v}
	d, err := openDirAt(node, name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		e.st = stateMissing
		return e, nil
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		// A symlink or file named like a version was not made by Prepare.
		e.st, e.why = stateNotDir, "not a directory"
		return e, nil
	case err != nil:
		return e, fmt.Errorf("datadir: %w", err)
	}
	keep := false
	defer func() {
		if !keep {
			d.Close()
		}
	}()
	_, merr := readMarker(d, v)
	if merr == nil {
		e.st, e.dir, keep = stateValid, d, true
		return e, nil
	}
	if !errors.Is(merr, errNoMarker) && !errors.Is(merr, errBadMarker) {
		return e, merr
	}
	switch ours, tenure, err := ownLeftover(d, v, c); {
	case err != nil:
		return e, err
	case ours:
		e.st, e.why, e.dir, e.tenure, keep = stateLeftover, merr.Error(), d, tenure, true
		return e, nil
	}
	switch empty, err := isEmpty(d); {
	case err != nil:
		return e, err
	case empty:
		e.st, e.why, e.dir, keep = stateEmpty, "empty", d, true
		return e, nil
	}
	switch lone, ok, err := onlyInProgress(d, c); {
	case err != nil:
		return e, err
	case ok:
		e.st, e.why, e.dir, e.lone, keep = stateNoData, "only an in-progress file", d, lone, true
		return e, nil
	}
	if errors.Is(merr, errBadMarker) {
		e.st, e.why = stateBadMarker, merr.Error()
		return e, nil
	}
	e.st, e.why = stateNotOurs, "no marker and no in-progress file of this cluster"
	return e, nil
}

// versionDirs lists the version directories of node in descending order.
func versionDirs(nodeDir *os.File) ([]node.Version, error) {
	names, err := readDirNames(nodeDir)
	if err != nil {
		return nil, fmt.Errorf("datadir: listing versions: %w", err)
	}
	var vs []node.Version
	for _, n := range names {
		if v, ok := parseVersionDirName(n); ok {
			vs = append(vs, v)
		}
	}
	// Descending: the newest first.
	slices.SortFunc(vs, func(a, b node.Version) int { return cmp.Compare(b, a) })
	return vs, nil
}

// plan is what Prepare found in the node directory.
type plan struct {
	target entry // stateMissing, stateLeftover (our tenure's), stateEmpty or stateNoData
	source entry // the newest valid version below the target; dir is nil if there is none
}

func (p *plan) close() {
	p.target.close()
	p.source.close()
}

// planPrepare decides, without writing, what Prepare of version k does, or
// why it must not. Its source is the newest valid version below k; every
// version above that source must be one that cannot hold newer data: a
// directory without a marker never was complete, but an unreadable marker
// or a symlink or file named like a version cannot be judged. A target left
// unfinished is redone only if it names tenure. The caller closes the plan.
func planPrepare(node *os.File, nodePath string, k node.Version, c Cluster, tenure string) (p plan, err error) {
	vs, err := versionDirs(node)
	if err != nil {
		return plan{}, err
	}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	var (
		newer   string // the newest valid version above k
		unknown error  // the newest unreadable marker above the source
	)
	for _, v := range vs {
		name := versionDirName(v)
		dir := filepath.Join(nodePath, name)
		e, err := inspect(node, name, v, c)
		if err != nil {
			return p, err
		}
		switch {
		case v > k && e.st == stateValid:
			if newer == "" {
				newer = dir
			}
		case v == k:
			p.target, e.dir = e, nil
		case v < k && e.st == stateValid:
			p.source, e.dir = e, nil
		}
		e.close()
		switch {
		case unknown != nil:
		case e.st == stateBadMarker:
			unknown = fmt.Errorf("%w: %s has a marker that cannot be read (%s); it may be a newer version in another format, and is left in place",
				ErrUnrecognized, dir, e.why)
		case e.st == stateNotDir:
			// A symlink may lead to a valid newer version (moved to
			// another volume); it is never followed, so never judged.
			unknown = fmt.Errorf("%w: %s is not a directory (a symlink or a file named like a version); it may stand for a newer version, and is left in place",
				ErrUnrecognized, dir)
		}
		if p.source.dir != nil {
			break
		}
	}
	switch {
	case newer != "":
		return p, fmt.Errorf("%w: %s is valid, above version %d being prepared", ErrNewerVersion, newer, k)
	case p.target.st == stateValid:
		return p, fmt.Errorf("%w: %s", ErrVersionUsed, filepath.Join(nodePath, versionDirName(k)))
	case p.target.st == stateLeftover && (tenure == "" || p.target.tenure != tenure):
		// The in-progress file cannot tell a crash from a live preparation.
		return p, fmt.Errorf("%w: %s is being prepared by another holder of this version (tenure %q, ours %q), or was left by a crashed one; "+
			"it is left in place, and a later version's garbage collection removes it",
			ErrVersionUsed, filepath.Join(nodePath, versionDirName(k)), p.target.tenure, tenure)
	case p.target.st == stateNotOurs || p.target.st == stateNotDir || p.target.st == stateBadMarker:
		return p, fmt.Errorf("%w: %s exists without a valid marker and is not a leftover of this cluster (%s); it is left in place",
			ErrUnrecognized, filepath.Join(nodePath, versionDirName(k)), p.target.why)
	case unknown != nil:
		return p, unknown
	}
	return p, nil
}

// sourceStillValid checks, through the directory the copy read from, that
// the source still has the marker it had before the copy: garbage
// collection (a stale holder's too) removes a version's marker durably
// before any of its contents, so a copy made while it ran may be torn.
func sourceStillValid(src entry, before Marker) error {
	after, err := readMarker(src.dir, src.v)
	switch {
	case err != nil:
		return fmt.Errorf("%w: the source %s lost its marker during the copy (removed by garbage collection?): %w; the next attempt redoes the copy",
			ErrValidation, src.name, err)
	case !after.InitializedAt.Equal(before.InitializedAt) || after.Version != before.Version ||
		(after.InitializedFrom == nil) != (before.InitializedFrom == nil) ||
		(after.InitializedFrom != nil && *after.InitializedFrom != *before.InitializedFrom):
		return fmt.Errorf("%w: the marker of the source %s changed during the copy; the next attempt redoes the copy",
			ErrValidation, src.name)
	}
	return nil
}

// collect implements Collect on an open node directory; nodePath is only for
// messages.
func collect(ctx context.Context, node *os.File, nodePath string, current node.Version, keep int, c Cluster, log *slog.Logger) ([]string, error) {
	vs, err := versionDirs(node)
	if err != nil {
		return nil, err
	}
	var (
		removed, notOurs []string
		errs             []error
		valid            int // valid versions seen so far, newest first
	)
	for _, v := range vs {
		if err := ctx.Err(); err != nil {
			return removed, err
		}
		name := versionDirName(v)
		p := filepath.Join(nodePath, name)
		e, err := inspect(node, name, v, c)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if e.st == stateValid {
			valid++
		}
		switch {
		case v >= current, e.st == stateMissing, e.st == stateValid && valid <= keep:
			e.close()
			continue
		case e.st == stateValid:
			err = removeValid(node, e, c)
		case e.st == stateLeftover, e.st == stateEmpty, e.st == stateNoData:
			err = removeUnfinished(node, e)
		default:
			notOurs = append(notOurs, p)
			continue
		}
		e.close()
		if err != nil {
			errs = append(errs, fmt.Errorf("datadir: removing %s: %w", name, err))
			continue
		}
		log.Info("datadir: removed old version", "dir", p, "was_valid", e.st == stateValid)
		removed = append(removed, p)
	}
	if len(notOurs) > 0 {
		log.Warn("datadir: not ours, left in place", "dirs", notOurs,
			"why", "no valid marker and no in-progress file of this cluster; remove them by hand once checked")
	}
	return removed, errors.Join(errs...)
}

// unmark removes the marker of dir durably.
func unmark(dir *os.File) error {
	if err := unlinkAt(dir, MarkerName); err != nil {
		return err
	}
	return syncFile(dir)
}

// takenOver re-inspects the target name of node after Prepare failed in
// dst, the directory it created there, and says why another holder of the
// version has it now, or "" if nothing shows that. ours is our in-progress
// file (nil before it was created); another inode, or a file naming another
// tenure (inode numbers are reused), is someone else's. After markerStart
// a marker may be ours.
func takenOver(node *os.File, name string, dst *os.File, ours *unix.Stat_t, tenure string, markerStart bool) string {
	if goneAt(node, name, dst) {
		return "was removed or replaced while it was being prepared"
	}
	d, err := openDirAt(node, name)
	if err != nil {
		return ""
	}
	defer d.Close()
	var st unix.Stat_t
	if !markerStart && fstatat(int(d.Fd()), MarkerName, &st) == nil {
		return "holds a marker this preparation did not write"
	}
	if fstatat(int(d.Fd()), PreparingName, &st) != nil {
		return ""
	}
	if ours != nil && (st.Dev != ours.Dev || st.Ino != ours.Ino) {
		return "holds an in-progress file this preparation did not write"
	}
	if b, err := readSmallFileAt(d, PreparingName); err == nil {
		if ip, ok := parseInProgress(b); ok && ip.Tenure != tenure {
			return fmt.Sprintf("holds the in-progress file of tenure %q", ip.Tenure)
		}
	}
	return ""
}

// removeValid turns a valid directory into our leftover before deleting it:
// the in-progress file first, then the marker, each durably. A crash at any
// point leaves a directory that is valid (a complete copy) or ours, never one
// that is half-deleted yet unrecognisable.
func removeValid(node *os.File, e entry, c Cluster) error {
	if err := makeWritable(e.dir); err != nil {
		return err
	}
	if err := writeInProgress(e.dir, e.v, c, "", true); err != nil {
		return err
	}
	if err := unlinkAt(e.dir, MarkerName); err != nil {
		return err
	}
	if err := syncFile(e.dir); err != nil {
		return err
	}
	return removeLeftover(node, e)
}

// removeUnfinished removes our leftover, or an empty directory or one with
// only an in-progress file (which must still be the file judged); the
// latter two with rmdir(2), which fails if anything was written meanwhile.
func removeUnfinished(node *os.File, e entry) error {
	switch e.st {
	case stateEmpty:
		return rmdirAt(node, e.name, e.dir)
	case stateNoData:
		var st unix.Stat_t
		if err := fstatat(int(e.dir.Fd()), PreparingName, &st); err != nil {
			return err
		}
		if st.Dev != e.lone.Dev || st.Ino != e.lone.Ino || st.Size != e.lone.Size {
			return fmt.Errorf("%s/%s changed since it was inspected; left in place", e.dir.Name(), PreparingName)
		}
		if err := unlinkAt(e.dir, PreparingName); err != nil {
			return err
		}
		return rmdirAt(node, e.name, e.dir)
	}
	return removeLeftover(node, e)
}

// removeLeftover deletes everything but the in-progress file, then it, then
// the directory, so a crash halfway leaves a directory still recognisably
// ours, or empty. It works below the directory inspect judged (e.dir), never
// by path, and follows no symlink.
func removeLeftover(node *os.File, e entry) error {
	if err := makeWritable(e.dir); err != nil {
		return err
	}
	// The in-progress file goes first: its preparer, if still at work,
	// unlinks it too when it completes, and exactly one unlink succeeds.
	// Losing means the directory was completed meanwhile: nothing of it is
	// touched. Winning, the marker (the preparer may have written it) goes
	// next, durably, so no marker ever vouches for a directory being
	// emptied. A crash after the first unlink leaves a directory that is
	// valid and whole, or neither marked nor ours: left for an operator.
	if err := unlinkAt(e.dir, PreparingName); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s/%s: %w", e.dir.Name(), PreparingName, errCompletedMeanwhile)
		}
		return err
	}
	if err := unlinkAt(e.dir, MarkerName); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := syncFile(e.dir); err != nil {
		return err
	}
	names, err := readDirNames(e.dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := removeAllAt(e.dir, n); err != nil {
			return err
		}
	}
	return rmdirAt(node, e.name, e.dir)
}

// errCompletedMeanwhile: a directory judged a leftover was completed by its
// preparer before the removal could claim it; it is left in place.
var errCompletedMeanwhile = errors.New("completed by its preparer meanwhile; left in place")

// removeFailedTarget removes the target name of node after a failed
// preparation, if it is positively ours: still the directory dst that
// Prepare made, without a valid marker, and holding the in-progress file
// ours that Prepare wrote. ours nil (no in-progress file yet) removes it
// only if it is empty (rmdir).
func removeFailedTarget(node *os.File, name string, v node.Version, c Cluster, dst *os.File, ours *unix.Stat_t) error {
	if ours == nil {
		return rmdirAt(node, name, dst)
	}
	e, err := inspect(node, name, v, c)
	if err != nil {
		return err
	}
	defer e.close()
	if e.st != stateLeftover {
		return fmt.Errorf("%s is no longer our unfinished directory (%s); left in place", name, e.why)
	}
	var got, want, ip unix.Stat_t
	if err := unix.Fstat(int(e.dir.Fd()), &got); err != nil {
		return err
	}
	if err := unix.Fstat(int(dst.Fd()), &want); err != nil {
		return err
	}
	if err := fstatat(int(e.dir.Fd()), PreparingName, &ip); err != nil {
		return err
	}
	if got.Dev != want.Dev || got.Ino != want.Ino || ip.Dev != ours.Dev || ip.Ino != ours.Ino {
		return fmt.Errorf("%s is no longer the directory this preparation made; left in place", name)
	}
	// Unlike a leftover of another preparer, ours will get no marker: the
	// in-progress file goes last, so that whatever a failing file system
	// (an fsync that fails, again) stops, the directory stays our leftover.
	if err := makeWritable(e.dir); err != nil {
		return err
	}
	names, err := readDirNames(e.dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		if n == PreparingName {
			continue
		}
		if err := removeAllAt(e.dir, n); err != nil {
			return err
		}
	}
	if err := unlinkAt(e.dir, PreparingName); err != nil {
		return err
	}
	return rmdirAt(node, name, e.dir)
}

// removeLeftoversBelow removes the unfinished directories of this cluster
// (our leftovers, empty ones, ones with only an in-progress file) below
// version k, as GC would after the preparation: their tenure is over.
// Errors are logged: what is left, GC tries again.
func removeLeftoversBelow(node *os.File, nodePath string, k node.Version, c Cluster, log *slog.Logger) (removed []string) {
	vs, err := versionDirs(node)
	if err != nil {
		log.Warn("datadir: listing leftovers", "dir", nodePath, "err", err)
		return nil
	}
	for _, v := range vs {
		if v >= k {
			continue
		}
		name := versionDirName(v)
		e, err := inspect(node, name, v, c)
		if err != nil {
			log.Warn("datadir: judging a leftover", "dir", filepath.Join(nodePath, name), "err", err)
			continue
		}
		if e.st == stateLeftover || e.st == stateEmpty || e.st == stateNoData {
			if err := removeUnfinished(node, e); err != nil {
				log.Warn("datadir: removing a leftover", "dir", filepath.Join(nodePath, name), "err", err)
			} else {
				log.Info("datadir: removed a leftover before preparing", "dir", filepath.Join(nodePath, name))
				removed = append(removed, filepath.Join(nodePath, name))
			}
		}
		e.close()
	}
	return removed
}
