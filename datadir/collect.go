package datadir

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/nodeid/nodeid/node"
)

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
		log.Warn("garbage collection skipped: the data root is not claimed by this cluster", "root", root, "cluster", cfg.cluster.String())
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
	removed, _, err := collect(ctx, node, filepath.Join(root, nodeDirName(inst.ID)), inst.Version, cfg.keep, cfg.cluster, log, cfg.steps)
	return removed, err
}

// collect implements Collect on an open node directory; nodePath is only for
// messages. It also returns the directories it left because another file
// system is mounted in or on them (see errMountPoint).
func collect(ctx context.Context, node *nodeDir, nodePath string, current node.Version, keep int, c Cluster, log *slog.Logger, steps *atomic.Int64) (_ []string, mounts []string, _ error) {
	vs, err := versionDirs(node.f)
	if err != nil {
		return nil, nil, err
	}
	var (
		removed, notOurs []string
		left             []string // garbage names left at a mount this run
		errs             []error
		valid            int // valid versions seen so far, newest first
	)
	for _, v := range vs {
		if err := ctx.Err(); err != nil {
			return removed, mounts, err
		}
		name := versionDirName(v)
		p := filepath.Join(nodePath, name)
		e, err := inspect(node.f, name, v, c, steps)
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
			err = removeValid(node, &e, c, steps)
		case e.st == stateLeftover, e.st == stateEmpty, e.st == stateNoData:
			err = removeUnfinished(node, &e, steps)
		default:
			notOurs = append(notOurs, p)
			continue
		}
		e.close()
		if errors.Is(err, errMountPoint) {
			// Under its garbage name if the mount was met while
			// emptying it (e.name): left there, never renamed back.
			p = filepath.Join(nodePath, e.name)
			notOurs = append(notOurs, p)
			mounts = append(mounts, p)
			left = append(left, e.name)
			log.Warn("not ours, left in place: a mount point", "dir", p, "err", err)
			continue
		}
		if errors.Is(err, errMovedOut) {
			// Moved away (out of the data root, perhaps) while it was
			// being emptied: no longer ours to remove.
			p = filepath.Join(nodePath, e.name)
			notOurs = append(notOurs, p)
			log.Warn("not ours, left in place: moved or replaced while it was being removed", "dir", p, "err", err)
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("datadir: removing %s: %w", name, err))
			if errors.Is(err, ErrSyncTimeout) {
				// The hung flush holds the node directory's lock: the
				// next rename there would wait on it, unbounded.
				return removed, mounts, errors.Join(errs...)
			}
			continue
		}
		log.Info("removed old version", "dir", p, "was_valid", e.st == stateValid)
		removed = append(removed, p)
	}
	// What removals left out of the versions (a crash, a stale
	// preparer's late write): judged, and finished.
	gr, gn, gm, ge := collectGarbage(node, nodePath, current, c, left, steps)
	for _, p := range gr {
		log.Info("removed what a removal left", "dir", p)
	}
	for _, p := range gm {
		log.Warn("not ours, left in place: a mount point", "dir", p)
	}
	removed, notOurs, mounts, errs = append(removed, gr...), append(notOurs, gn...), append(mounts, gm...), append(errs, ge...)
	if len(notOurs) > 0 {
		log.Warn("not ours, left in place", "dirs", notOurs,
			"why", "no valid marker and no in-progress file of this cluster; remove them by hand once checked")
	}
	return removed, mounts, errors.Join(errs...)
}

// removeValid deletes a valid directory without needing free space first
// (the disk may be full: see freeSpace): it is renamed out of the
// versions (moveToGarbage), durably, then emptied, its marker first
// (removeGarbage). A crash at any point leaves the directory valid and
// whole, or garbage that is positively ours.
func removeValid(node *nodeDir, e *entry, c Cluster, steps *atomic.Int64) error {
	if err := checkVersionNotMount(node.f, e.dir); err != nil {
		return err
	}
	return removeMoved(node, e, steps)
}

// removeMoved renames e out of the versions, then removes it. A mount
// point met below it (one the mount table did not show) stops the removal
// there; what is left stays under its garbage name, never renamed back
// into the versions: a stale preparer may have linked its marker into it
// meanwhile, which must never vouch for a half-emptied directory. Every
// GC reports it (a mount point) until it is unmounted, then finishes it.
func removeMoved(node *nodeDir, e *entry, steps *atomic.Int64) error {
	if err := moveToGarbage(node.f, e); err != nil {
		return err
	}
	if err := removeGarbage(node, e.name, e.dir, steps); err != nil {
		return fmt.Errorf("%w: %s: %w", errGarbageLeft, e.name, err)
	}
	return nil
}

// removeUnfinished removes our leftover, or an empty directory or one with
// only an in-progress file (which must still be the file judged); the
// latter two with rmdir(2), which fails if anything was written meanwhile.
func removeUnfinished(node *nodeDir, e *entry, steps *atomic.Int64) error {
	if err := checkVersionNotMount(node.f, e.dir); err != nil {
		return err
	}
	switch e.st {
	case stateEmpty:
		return rmdirAt(node.f, e.name, e.dir)
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
		return rmdirAt(node.f, e.name, e.dir)
	}
	return removeLeftover(node, e, steps)
}

// removeLeftover removes our leftover: it claims the removal, renames the
// directory out of the versions, then empties and removes it. It works
// below the directory inspect judged (e.dir), never by path, and follows
// no symlink.
func removeLeftover(node *nodeDir, e *entry, steps *atomic.Int64) error {
	if e.removing {
		return removeMoved(node, e, steps)
	}
	if _, err := sameAt(node.f, e.name, e.dir); err != nil {
		return err
	}
	if err := makeWritable(e.dir); err != nil {
		return err
	}
	// The claim: its preparer, if still at work, unlinks PreparingName
	// when it completes, and exactly one of that unlink and this rename
	// succeeds. Losing means the directory was completed meanwhile:
	// nothing of it is touched. Winning, the preparer fails and unmarks;
	// should it put its marker in place before (killed, or paused, before
	// its unmark), the directory is still whole, and once renamed out of
	// the versions its marker vouches for nothing. A crash in between
	// leaves it whole and valid, or claimed: ours, being removed.
	fd := int(e.dir.Fd())
	if err := unix.Renameat(fd, PreparingName, fd, claimName); err != nil {
		if err == unix.ENOENT {
			return fmt.Errorf("%s/%s: %w", e.dir.Name(), PreparingName, errCompletedMeanwhile)
		}
		return &os.LinkError{Op: "renameat", Old: filepath.Join(e.dir.Name(), PreparingName), New: filepath.Join(e.dir.Name(), claimName), Err: err}
	}
	if testHookAfterClaim != nil {
		testHookAfterClaim(e.dir.Name())
	}
	return removeMoved(node, e, steps)
}

// testHookAfterClaim runs after removeLeftover claimed a leftover, before
// it renames it out of the versions.
var testHookAfterClaim func(dir string)

// removeLeftoversBelow removes the unfinished directories of this cluster
// (our leftovers, empty ones, ones with only an in-progress file) below
// version k, as GC would after the preparation: their tenure is over.
// Errors are logged: what is left, GC tries again.
func removeLeftoversBelow(node *nodeDir, nodePath string, k node.Version, c Cluster, log *slog.Logger, steps *atomic.Int64) (removed, mounts []string) {
	vs, err := versionDirs(node.f)
	if err != nil {
		log.Warn("listing leftovers", "dir", nodePath, "err", err)
		return nil, nil
	}
	var left []string // garbage names left at a mount just now
	for _, v := range vs {
		if v >= k {
			continue
		}
		name := versionDirName(v)
		e, err := inspect(node.f, name, v, c, steps)
		if err != nil {
			log.Warn("judging a leftover", "dir", filepath.Join(nodePath, name), "err", err)
			continue
		}
		if e.st == stateLeftover || e.st == stateEmpty || e.st == stateNoData {
			if err := removeUnfinished(node, &e, steps); errors.Is(err, errMountPoint) {
				// e.name: its garbage name if met while emptying it.
				mounts, left = append(mounts, filepath.Join(nodePath, e.name)), append(left, e.name)
				log.Warn("not ours, left in place: a mount point", "dir", filepath.Join(nodePath, e.name), "err", err)
			} else if err != nil {
				log.Warn("removing a leftover", "dir", filepath.Join(nodePath, name), "err", err)
			} else {
				log.Info("removed a leftover before preparing", "dir", filepath.Join(nodePath, name))
				removed = append(removed, filepath.Join(nodePath, name))
			}
		}
		e.close()
	}
	gr, _, gm, ge := collectGarbage(node, nodePath, k, c, left, steps)
	for _, p := range gr {
		log.Info("removed what a removal left, before preparing", "dir", p)
	}
	for _, p := range gm {
		log.Warn("not ours, left in place: a mount point", "dir", p)
	}
	for _, err := range ge {
		log.Warn("removing what a removal left", "err", err)
	}
	return append(removed, gr...), append(mounts, gm...)
}
