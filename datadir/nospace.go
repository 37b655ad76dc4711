package datadir

import (
	"context"
	"errors"
	"log/slog"
	"os"
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
func freeSpace(ctx context.Context, node *os.File, nodePath string, source node.Version, cfg *config, log *slog.Logger) (removed, mounts []string) {
	// Counting from source (valid, kept as the newest below it), the new
	// version takes one place of Keep.
	removed, mounts, err := collect(ctx, node, nodePath, source, cfg.keep-1, cfg.cluster, log)
	if err != nil {
		log.Warn("freeing space failed in part", "err", err)
	}
	return removed, mounts
}

// clearTarget empties the target dst of a copy that failed, except for its
// in-progress file, for the copy to be made again: it stays our leftover
// throughout.
func clearTarget(dst *os.File) error {
	if err := makeWritable(dst); err != nil {
		return err
	}
	names, err := readDirNames(dst)
	if err != nil {
		return err
	}
	for _, n := range names {
		if n == PreparingName {
			continue
		}
		if err := removeAllAt(dst, n); err != nil {
			return err
		}
	}
	return syncFile(dst)
}
