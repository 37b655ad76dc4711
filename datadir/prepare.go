package datadir

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeid/nodeid/node"
)

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
//
// Out of space (ENOSPC, EDQUOT) at any step, it removes what garbage
// collection would remove once the new version is valid (see freeSpace)
// and, if that freed anything, prepares once more.
func Prepare(ctx context.Context, root string, inst node.Instance, opts Options) (string, Result, error) {
	start := time.Now()
	var a attempt
	dir, res, err := prepare(ctx, root, inst, opts, &a)
	if err == nil || a.claimed || !retryNoSpace(err) {
		return dir, res, err
	}
	freed, mounts := freeSpaceFor(ctx, root, inst, opts)
	if len(freed) == 0 {
		return dir, res, err
	}
	a = attempt{freed: freed, mounts: mounts}
	dir, res, err = prepare(ctx, root, inst, opts, &a)
	res.Duration = time.Since(start)
	return dir, res, err
}

// prepare is one attempt of Prepare. a carries what an earlier attempt
// freed, and reports whether this one claimed the root.
func prepare(ctx context.Context, root string, inst node.Instance, opts Options, a *attempt) (_ string, _ Result, err error) {
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
		if p, err = planPrepare(nodeDir.f, nodePath, inst.Version, cfg.cluster, cfg.tenure, cfg.steps); err != nil {
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
		a.claimed = claim
	}
	if nodeDir == nil {
		if nodeDir, err = openNodeDir(rootDir, nodeName, cfg.dirMode, true); err != nil {
			return "", Result{}, err
		}
		defer nodeDir.Close()
	}
	var (
		pre    []string // removed before preparing
		mounts []string // left: mount points (see errMountPoint)
		res    Result
	)
	if !claim {
		// Space held by our unfinished directories below the target (an
		// attempt that failed and could not clean up, a crash) could make
		// this copy fail too: GC would only remove them after it succeeded.
		pre, mounts = removeLeftoversBelow(nodeDir, nodePath, inst.Version, cfg.cluster, log, cfg.steps)
	}
	pre, mounts = append(a.freed, pre...), appendNew(a.mounts, mounts)
	if p.target.st == stateLeftover || p.target.st == stateEmpty || p.target.st == stateNoData {
		log.Warn("removing leftovers of an interrupted preparation", "dir", dir)
		switch err := removeUnfinished(nodeDir, &p.target, cfg.steps); {
		case err == nil:
		case errors.Is(err, errGarbageLeft) && errors.Is(err, errMountPoint):
			// Out of the versions, and left there (never renamed back):
			// the target's name is free.
			g := filepath.Join(nodePath, p.target.name)
			mounts = appendNew(mounts, []string{g})
			log.Warn("not ours, left in place: a mount point", "dir", g, "err", err)
		case errors.Is(err, errGarbageLeft):
			// Out of the versions: the target's name is free.
			log.Warn("the leftovers of an interrupted preparation are not all removed; garbage collection finishes them", "dir", dir, "err", err)
		default:
			if errors.Is(err, errMountPoint) {
				return "", Result{}, fmt.Errorf("%w: %s: %w", ErrUnrecognized, dir, err)
			}
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
	dstID, err := idOf(dst)
	if err != nil {
		return "", Result{}, fmt.Errorf("datadir: %w", err)
	}
	// node-N/vK must still lead to dst wherever Prepare writes through it
	// (docs/datadir.md, "What a tenant who renames our directories can
	// cause"): a target moved away is never written on, nor reported.
	inPlace := func() error { return targetAt(nodeDir, target, dstID) }
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
			log.Warn("the failed target is left for the next preparation: the file system does not complete flushes", "dir", dir, "error", err)
			return
		}
		if why := takenOver(nodeDir, target, dst, ours, cfg.tenure, markerStart); why != "" {
			err = fmt.Errorf("%w: %s %s, by another holder of this version: %w", ErrVersionUsed, dir, why, err)
			return
		}
		// Positively ours and unfinished: remove it, so that a failed
		// attempt (ENOSPC, an unreadable file) does not hold space or pile
		// up. What cannot be removed now, the next Prepare or GC removes.
		if rerr := removeFailedTarget(nodeDir, target, inst.Version, cfg.cluster, dst, ours, cfg.steps); rerr != nil {
			log.Warn("could not remove the failed target; the next preparation removes it", "dir", dir, "err", rerr)
		} else {
			log.Warn("removed the failed target", "dir", dir, "err", err)
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

	// PreviousGraceful vouches only for the holder of K-1: an older
	// source's holder may be a stale one still writing it. Building from
	// the newest complete version is still the rule (the node must
	// start), but as after an ungraceful takeover.
	// A first tenure (v1) without a source has no predecessor to miss:
	// v0 is a lease that was never held, with no directory.
	firstTenure := inst.Version == 1 && p.source.dir == nil
	if cfg.graceful && inst.Version > 0 && !firstTenure && (p.source.dir == nil || p.source.v != inst.Version-1) {
		cfg.graceful, cfg.verifyContent = false, true
		res.PredecessorIncomplete = true
		// No source: the field is left out, so it is a number wherever
		// it appears.
		attrs := []any{"predecessor", filepath.Join(nodePath, versionDirName(inst.Version-1))}
		if p.source.dir != nil {
			attrs = append(attrs, "source_version", int64(p.source.v))
		}
		log.Warn("the graceful predecessor's version is not complete: the source is prepared as after an ungraceful takeover", attrs...)
	}
	var (
		from *node.Version
		t    *tree
	)
	if p.source.dir != nil {
		src := p.source.v
		res.HasSource, res.Source, from = true, src, &src
		log.Info("preparing from previous version", "source_version", int64(src), "graceful", cfg.graceful)
		before, err := readMarker(p.source.dir, src)
		if err != nil {
			return "", Result{}, fmt.Errorf("%w: source %s: %w", ErrValidation, p.source.name, err)
		}
		t = &tree{
			ctx: ctx, cfg: cfg, log: log, node: nodeDir.r,
			src: p.source.name, dst: target,
			srcDir: p.source.dir, dstDir: dst, nodeDir: nodeDir,
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
		if err := inPlace(); err != nil {
			return "", Result{}, err
		}
		if err := dst.Chmod(cfg.dirMode); err != nil {
			return "", Result{}, fmt.Errorf("datadir: %w", err)
		}
	} else {
		log.Info("no valid previous version, starting empty")
	}

	// Everything below the marker must be durable before the marker is.
	if flushBeforeMarker {
		step(cfg.steps) // a fresh window for the flush (Options.Progress)
		if err := syncTree(dst); err != nil {
			return "", Result{}, fmt.Errorf("datadir: flushing %s: %w", dir, err)
		}
	}
	step(cfg.steps)
	if err := ctx.Err(); err != nil {
		return "", Result{}, err
	}
	m := Marker{InitializedAt: time.Now().UTC(), Version: inst.Version, InitializedFrom: from}
	if err := inPlace(); err != nil {
		return "", Result{}, err
	}
	markerStart = true
	// The marker is written under another name (durably), and put in place
	// only once the target passed the check below: a failed check then
	// never leaves a marker to remove, which could fail too.
	if err := writeMarkerAside(dst, m); err != nil {
		return "", Result{}, fmt.Errorf("datadir: writing marker in %s: %w", dir, err)
	}
	if testHookAfterMarker != nil {
		testHookAfterMarker(dir)
	}
	// Another provider's GC (Camunda's) may have been deleting the target
	// while it was flushed: a marker over a torn copy is the one thing it
	// must never vouch for. The in-progress file is still there, so the
	// directory stays our leftover.
	if t != nil {
		if err := t.recheck(); err != nil {
			if !errors.Is(err, ErrValidation) {
				err = fmt.Errorf("datadir: checking %s again before its marker: %w", dir, err)
			}
			if rerr := unlinkAt(dst, markerAsideName); rerr != nil {
				log.Warn("cannot remove the unpublished marker (not a marker: the directory stays our leftover)", "dir", dir, "err", rerr)
			}
			return "", Result{}, err
		}
	}
	if err := inPlace(); err != nil {
		if rerr := unlinkAt(dst, markerAsideName); rerr != nil {
			log.Warn("cannot remove the unpublished marker (not a marker: the directory stays our leftover)", "dir", dir, "err", rerr)
		}
		return "", Result{}, err
	}
	if err := publishMarker(dst); err != nil {
		return "", Result{}, fmt.Errorf("datadir: putting the marker of %s in place: %w", dir, err)
	}
	if testHookAfterPublish != nil {
		testHookAfterPublish(dir)
	}
	// Moved between the check above and the publication: the marker, now
	// in a directory that is not node-N/vK, goes again (through dst), and
	// the in-progress file stays.
	if err := inPlace(); err != nil {
		if rerr := unmark(dst); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			log.Warn("cannot remove the marker of a target moved away", "dir", dir, "err", rerr)
		}
		return "", Result{}, err
	}
	// Exactly one unlink of the in-progress file succeeds: ours, and the
	// directory is valid; or that of a later tenure's cleanup, which judged
	// it a leftover (our lease is over) and now owns its removal. Then the
	// marker must not stay over a directory being deleted.
	switch err := unlinkAt(dst, PreparingName); {
	case errors.Is(err, fs.ErrNotExist):
		if rerr := unmark(dst); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			log.Warn("cannot remove the marker of a directory taken for removal", "dir", dir, "err", rerr)
		}
		return "", Result{}, fmt.Errorf("%w: %s was taken for removal by a later tenure's cleanup while it was completed", ErrVersionUsed, dir)
	case err != nil:
		log.Warn("cannot remove the in-progress file", "dir", dir, "err", err)
	}
	// vK gets vJ's times last: the marker and the in-progress file moved
	// them. The directory is valid and ready, so a failure is logged.
	if err := inPlace(); err != nil {
		// Moved away since the check after the publication: not what we
		// report, nor a version where it is now.
		if rerr := unmark(dst); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			log.Warn("cannot remove the marker of a target moved away", "dir", dir, "err", rerr)
		}
		return "", Result{}, err
	}
	if t != nil {
		if err := t.keepTopTimes(); err != nil {
			log.Warn("cannot give the new directory the source's times", "dir", dir, "err", err)
		}
	}

	p.close() // GC may remove the source
	if claim {
		// A root without an owner may be another cluster's (an earlier
		// release's, or Camunda's) still in use: delete nothing of it
		// until that cluster's next start has had the chance to refuse
		// the root (ErrForeignCluster) and stop us from claiming it.
		log.Info("garbage collection skipped until the next preparation: this one claimed the data root", "root", root)
	} else {
		removed, m, err := collect(ctx, nodeDir, nodePath, inst.Version, cfg.keep, cfg.cluster, log, cfg.steps)
		for _, d := range m {
			if !slices.Contains(mounts, d) { // met before the copy too
				mounts = append(mounts, d)
			}
		}
		res.MountPoints = len(mounts)
		// Newest first, as collect lists them.
		res.Removed = append(pre, removed...)
		slices.SortStableFunc(res.Removed, func(a, b string) int {
			return cmp.Compare(removedVersion(b), removedVersion(a))
		})
		switch {
		case errors.Is(err, ErrSyncTimeout):
			// vK is valid, but the file system stopped completing
			// flushes: that is a hang to report (nodeid-init exits 7),
			// not a GC failure to log and start the application on.
			return "", Result{}, fmt.Errorf("datadir: garbage collection after preparing %s: %w", dir, err)
		case err != nil:
			log.Warn("garbage collection failed", "err", err)
		}
	}
	res.Duration = time.Since(start)
	// Without a source from_version is left out (never a string): each
	// key has one type in JSON logs.
	attrs := []any{"dir", dir}
	if res.HasSource {
		attrs = append(attrs, "from_version", int64(res.Source))
	}
	attrs = append(attrs, "files_copied", res.FilesCopied, "bytes_copied", res.BytesCopied,
		"files_linked", res.FilesLinked, "bytes_linked", res.BytesLinked,
		"removed", len(res.Removed), "duration_seconds", logSeconds(res.Duration))
	log.Info("prepared", attrs...)
	return dir, res, nil
}

// removedVersion is the version of a directory in Result.Removed: a
// version's, or a garbage directory's.
func removedVersion(p string) node.Version {
	if v, ok := parseVersionDirName(filepath.Base(p)); ok {
		return v
	}
	v, _ := parseGarbageName(filepath.Base(p))
	return v
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
func planPrepare(node *os.File, nodePath string, k node.Version, c Cluster, tenure string, steps *atomic.Int64) (p plan, err error) {
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
		e, err := inspect(node, name, v, c, steps)
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
func takenOver(nd *nodeDir, name string, dst *os.File, ours *unix.Stat_t, tenure string, markerStart bool) string {
	node := nd.f
	if goneAt(node, name, dst) {
		return "was removed or replaced while it was being prepared"
	}
	if moved, _ := nd.moved(); moved {
		return "was moved away with its node directory while it was being prepared"
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

// errCompletedMeanwhile: a directory judged a leftover was completed by its
// preparer before the removal could claim it; it is left in place.
var errCompletedMeanwhile = errors.New("completed by its preparer meanwhile; left in place")

// removeFailedTarget removes the target name of node after a failed
// preparation, if it is positively ours: still the directory dst that
// Prepare made, without a valid marker, and holding the in-progress file
// ours that Prepare wrote. ours nil (no in-progress file yet) removes it
// only if it is empty (rmdir).
func removeFailedTarget(node *nodeDir, name string, v node.Version, c Cluster, dst *os.File, ours *unix.Stat_t, steps *atomic.Int64) error {
	if ours == nil {
		return rmdirAt(node.f, name, dst)
	}
	e, err := inspect(node.f, name, v, c, steps)
	if err != nil {
		return err
	}
	defer e.close()
	if e.st != stateLeftover {
		return fmt.Errorf("%s is no longer our unfinished directory (%s); left in place", name, e.why)
	}
	if err := checkVersionNotMount(node.f, e.dir); err != nil {
		return err
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
	// Emptied only while node-N/vK still leads to it: moved away (out of
	// the data root perhaps), it is left as it is.
	id := dirID{uint64(want.Dev), uint64(want.Ino)}
	guard := func() error { return targetAt(node, name, id) }
	for _, n := range names {
		if n == PreparingName {
			continue
		}
		if err := guard(); err != nil {
			return err
		}
		if err := removeAllAtGuarded(e.dir, n, steps, guard); err != nil {
			return err
		}
	}
	if err := guard(); err != nil {
		return err
	}
	if err := unlinkAt(e.dir, PreparingName); err != nil {
		return err
	}
	return rmdirAt(node.f, name, e.dir)
}

// logSeconds is d as a number of seconds to the millisecond, for log fields
// named *_seconds (1.519, not 1.5190000000000001).
func logSeconds(d time.Duration) float64 {
	return float64(d.Round(time.Millisecond).Milliseconds()) / 1000
}
