package datadir

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/nodeid/nodeid/node"
)

// noSpace reports a copy that failed for lack of space or quota.
func noSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// freeSpace removes, during the preparation of a version from source, what
// garbage collection removes once that version is valid: the valid versions
// below source beyond Keep (the new version and source count), and our
// unfinished directories below source. It never touches source or
// anything above it, nor what is not positively ours (see collect). It
// returns the directories removed and those left as mount points (errors are
// logged: a copy that still finds no space fails as before).
func freeSpace(ctx context.Context, node *nodeDir, nodePath string, source node.Version, cfg *config, log *slog.Logger) (removed, mounts []string) {
	// Counting from source (valid, kept as the newest below it), the new
	// version takes one place of Keep.
	removed, mounts, err := collect(ctx, node, nodePath, source, cfg.keep-1, cfg.cluster, log, cfg.steps)
	if err != nil {
		log.Warn("freeing space failed in part", "err", err)
	}
	return removed, mounts
}

// attempt links the attempts of one Prepare: what an earlier one freed
// (Result.Removed, Result.MountPoints), and whether this one claimed the
// root (then nothing may be removed for space).
type attempt struct {
	freed, mounts []string
	claimed       bool
}

// retryNoSpace says whether a failed attempt ran out of space, rather than
// being refused (a refusal may wrap the error that revealed it).
func retryNoSpace(err error) bool {
	for _, refusal := range []error{ErrVersionUsed, ErrNewerVersion, ErrUnrecognized, ErrForeignCluster, ErrSyncTimeout, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, refusal) {
			return false
		}
	}
	return noSpace(err)
}

// freeSpaceFor frees space for another attempt at preparing inst after
// one ran out of it (its failed target already removed): it judges the
// node directory afresh and runs freeSpace from the source it finds. It
// removes nothing on a root without an owner (see Prepare's claim), or when
// the preparation would be refused.
func freeSpaceFor(ctx context.Context, root string, inst node.Instance, opts Options) (removed, mounts []string) {
	cfg, err := opts.config()
	if err != nil {
		return nil, nil
	}
	log := cfg.log.With("node_id", inst.ID, "version", int64(inst.Version))
	rootDir, err := openRoot(root, true)
	if err != nil {
		return nil, nil
	}
	defer rootDir.Close()
	if claim, err := checkOwner(rootDir, root, cfg.cluster); err != nil || claim {
		return nil, nil
	}
	nodePath := filepath.Join(root, nodeDirName(inst.ID))
	nodeDir, err := openNodeDir(rootDir, nodeDirName(inst.ID), 0, false)
	if err != nil {
		return nil, nil
	}
	defer nodeDir.Close()
	p, err := planPrepare(nodeDir.f, nodePath, inst.Version, cfg.cluster, cfg.tenure, cfg.steps)
	if err != nil {
		return nil, nil
	}
	defer p.close()
	if p.source.dir == nil {
		return nil, nil
	}
	removed, mounts = freeSpace(ctx, nodeDir, nodePath, p.source.v, cfg, log)
	if len(removed) > 0 {
		log.Warn("out of space: removed versions beyond retention, preparing again", "removed", removed)
	}
	return removed, mounts
}

// appendNew appends to a what of b it does not hold yet.
func appendNew(a, b []string) []string {
	for _, s := range b {
		if !slices.Contains(a, s) {
			a = append(a, s)
		}
	}
	return a
}
