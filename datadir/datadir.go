package datadir

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

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
	markerMode              = fs.FileMode(0o644) // as Camunda's: readable by a broker of another user
)

// Options configure Prepare, and Collect (Keep, Cluster, Logger). The zero
// value is usable: copy everything except the marker, keep two versions,
// create directories 0750, no ownership check.
type Options struct {
	// PreviousGraceful reports that the previous holder released its lease
	// gracefully and so no longer writes into its directory. Every file is
	// then hard-linked instead of copied, if the source is that holder's
	// version (the one just below the version prepared); an older source
	// is prepared as after an ungraceful takeover (see
	// Result.PredecessorIncomplete).
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
	// with its source after a graceful takeover too (where files are copied
	// only when they cannot be linked). After an ungraceful one copied
	// files are always compared: a stale holder's stores through a shared
	// mmap move no stamp, so only the bytes show a copy it tore. It reads
	// both copies once more.
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

	// Logger receives progress and decisions, with component=datadir;
	// nil means slog.Default().
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

	// Progress, if not nil, is incremented as Prepare (or Collect) moves
	// on: once per entry copied, linked, validated, rechecked or removed,
	// per directory listed, per version or garbage directory judged (as
	// ours or not), and per chunk (at most 1 MiB) of a file's
	// bytes copied or compared. So it stands still only for a few system
	// calls, or one fsync or syncfs (SyncTimeout bounds those): a caller
	// that sees it unchanged for long knows a call on the file system did
	// not return, wherever it lies, on a mount inside the source too
	// (nodeid-init's --fs-timeout). A large file does not look like a hang.
	Progress *atomic.Int64
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

	// PredecessorIncomplete reports that Options.PreviousGraceful was set
	// but the predecessor's version (K-1) was not complete (no valid
	// marker): the source is an older version, or none, whose holder may
	// still be writing, so it was prepared as after an ungraceful
	// takeover.
	PredecessorIncomplete bool

	// Redone reports that the target existed as our own leftover of an
	// interrupted preparation (or empty) and was removed first.
	Redone bool

	// Removed lists the directories removed by garbage collection.
	Removed []string

	// MountPoints counts the directories that garbage collection (and the
	// removal of leftovers before the copy) left in place because another
	// file system is mounted in them or on them: nothing on a mount is
	// ours, so nothing there is removed or changed.
	MountPoints int

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
	steps         *atomic.Int64 // Options.Progress; nil counts nothing (see step)
}

func (o Options) config() (*config, error) {
	c := &config{
		graceful:      o.PreviousGraceful,
		settle:        o.SettleTime,
		rules:         CopyRules{SkipSegment: slices.Clone(o.Rules.SkipSegment), LinkAfterCrashSegment: slices.Clone(o.Rules.LinkAfterCrashSegment)},
		verifyContent: o.VerifyContent || !o.PreviousGraceful,
		keep:          o.Keep,
		dirMode:       o.DirMode,
		workers:       o.Workers,
		log:           o.Logger,
		progress:      o.ProgressInterval,
		cluster:       o.Cluster,
		tenure:        o.Tenure,
		steps:         o.Progress,
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
	c.log = c.log.With("component", "datadir")
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

// step counts one step of progress in steps (Options.Progress), if set.
func step(steps *atomic.Int64) {
	if steps != nil {
		steps.Add(1)
	}
}
