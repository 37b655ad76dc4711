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
	removed, _, err := collect(ctx, node.f, filepath.Join(root, nodeDirName(inst.ID)), inst.Version, cfg.keep, cfg.cluster, log, cfg.steps)
	return removed, err
}

// collect implements Collect on an open node directory; nodePath is only for
// messages. It also returns the directories it left because another file
// system is mounted in or on them (see errMountPoint).
func collect(ctx context.Context, node *os.File, nodePath string, current node.Version, keep int, c Cluster, log *slog.Logger, steps *atomic.Int64) (_ []string, mounts []string, _ error) {
	vs, err := versionDirs(node)
	if err != nil {
		return nil, nil, err
	}
	var (
		removed, notOurs []string
		errs             []error
		valid            int // valid versions seen so far, newest first
	)
	for _, v := range vs {
		if err := ctx.Err(); err != nil {
			return removed, mounts, err
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
			err = removeValid(node, e, c, steps)
		case e.st == stateLeftover, e.st == stateEmpty, e.st == stateNoData:
			err = removeUnfinished(node, e, steps)
		default:
			notOurs = append(notOurs, p)
			continue
		}
		e.close()
		if errors.Is(err, errMountPoint) {
			notOurs = append(notOurs, p)
			mounts = append(mounts, p)
			log.Warn("not ours, left in place: a mount point", "dir", p, "err", err)
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("datadir: removing %s: %w", name, err))
			continue
		}
		log.Info("removed old version", "dir", p, "was_valid", e.st == stateValid)
		removed = append(removed, p)
	}
	if len(notOurs) > 0 {
		log.Warn("not ours, left in place", "dirs", notOurs,
			"why", "no valid marker and no in-progress file of this cluster; remove them by hand once checked")
	}
	return removed, mounts, errors.Join(errs...)
}

// removeValid deletes a valid directory without needing free space first
// (the disk may be full: see freeSpace): its marker is renamed to
// removingName, durably, which makes it invalid yet still ours; then
// everything else goes, removingName last. A crash at any point leaves a
// directory that is valid (a complete copy) or ours, never one that is
// half-deleted yet unrecognisable.
func removeValid(node *os.File, e entry, c Cluster, steps *atomic.Int64) error {
	if err := checkVersionNotMount(node, e.dir); err != nil {
		return err
	}
	if err := makeWritable(e.dir); err != nil {
		return err
	}
	fd := int(e.dir.Fd())
	if err := unix.Renameat(fd, MarkerName, fd, removingName); err != nil {
		return &os.LinkError{Op: "renameat", Old: filepath.Join(e.dir.Name(), MarkerName), New: filepath.Join(e.dir.Name(), removingName), Err: err}
	}
	if err := syncFile(e.dir); err != nil {
		return err
	}
	return removeRemoving(node, e, steps)
}

// removeRemoving deletes a directory whose marker removeValid renamed to
// removingName: everything else first, then it, then the directory. No
// preparer works in such a directory (it was valid), so nothing races.
func removeRemoving(node *os.File, e entry, steps *atomic.Int64) error {
	if err := makeWritable(e.dir); err != nil {
		return err
	}
	names, err := readDirNames(e.dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		if n == removingName {
			continue
		}
		if err := removeAllAt(e.dir, n, steps); err != nil {
			return err
		}
	}
	if err := unlinkAt(e.dir, removingName); err != nil {
		return err
	}
	return rmdirAt(node, e.name, e.dir)
}

// removeUnfinished removes our leftover, or an empty directory or one with
// only an in-progress file (which must still be the file judged); the
// latter two with rmdir(2), which fails if anything was written meanwhile.
func removeUnfinished(node *os.File, e entry, steps *atomic.Int64) error {
	if err := checkVersionNotMount(node, e.dir); err != nil {
		return err
	}
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
	return removeLeftover(node, e, steps)
}

// removeLeftover deletes everything but the in-progress file, then it, then
// the directory, so a crash halfway leaves a directory still recognisably
// ours, or empty. It works below the directory inspect judged (e.dir), never
// by path, and follows no symlink.
func removeLeftover(node *os.File, e entry, steps *atomic.Int64) error {
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
	if e.removing {
		return removeRemoving(node, e, steps)
	}
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
		if err := removeAllAt(e.dir, n, steps); err != nil {
			return err
		}
	}
	return rmdirAt(node, e.name, e.dir)
}

// removeLeftoversBelow removes the unfinished directories of this cluster
// (our leftovers, empty ones, ones with only an in-progress file) below
// version k, as GC would after the preparation: their tenure is over.
// Errors are logged: what is left, GC tries again.
func removeLeftoversBelow(node *os.File, nodePath string, k node.Version, c Cluster, log *slog.Logger, steps *atomic.Int64) (removed, mounts []string) {
	vs, err := versionDirs(node)
	if err != nil {
		log.Warn("listing leftovers", "dir", nodePath, "err", err)
		return nil, nil
	}
	for _, v := range vs {
		if v >= k {
			continue
		}
		name := versionDirName(v)
		e, err := inspect(node, name, v, c)
		if err != nil {
			log.Warn("judging a leftover", "dir", filepath.Join(nodePath, name), "err", err)
			continue
		}
		if e.st == stateLeftover || e.st == stateEmpty || e.st == stateNoData {
			if err := removeUnfinished(node, e, steps); errors.Is(err, errMountPoint) {
				mounts = append(mounts, filepath.Join(nodePath, name))
				log.Warn("not ours, left in place: a mount point", "dir", filepath.Join(nodePath, name), "err", err)
			} else if err != nil {
				log.Warn("removing a leftover", "dir", filepath.Join(nodePath, name), "err", err)
			} else {
				log.Info("removed a leftover before preparing", "dir", filepath.Join(nodePath, name))
				removed = append(removed, filepath.Join(nodePath, name))
			}
		}
		e.close()
	}
	return removed, mounts
}
