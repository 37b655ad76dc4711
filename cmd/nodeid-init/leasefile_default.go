package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// defaultLeasePath is run's default lease file, $TMPDIR/nodeid-<uid>/lease.json:
// stable, so that `nodeid-init health` (an ECS health check, run in the
// same container) finds it without configuration, and one file per user
// rather than one per process.
func defaultLeasePath() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("nodeid-%d", os.Getuid()), "lease.json")
}

// checkTempDir verifies, without writing, that the default lease file's
// directory can be created in $TMPDIR.
func checkTempDir() error {
	dir := os.TempDir()
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return usagef("lease file: $TMPDIR %s is not writable: set --lease-file or NODEID_LEASE_FILE", dir)
	}
	return nil
}

// checkTempDirPlacement applies the outputs' rule (openHeldFile) to the
// default lease and peers files' directory before anything is created or
// logged: a $TMPDIR under the data root (a read-only root file system
// leaves only the data volume writable) must be reached inside it, not
// through a symlink or `..` that leads out of it.
func (s *settings) checkTempDirPlacement() error {
	if err := s.checkDataRoot(); err != nil {
		return err
	}
	dir := os.TempDir()
	root, rel, err := underDataRoot(dir, s.dataRoot)
	if err != nil || root == nil {
		return nil // not under it; a failure to tell shows again when the outputs are opened
	}
	defer root.Close()
	d, err := root.OpenRoot(rel)
	if err != nil {
		return usagef("lease file: $TMPDIR %s lies under the data root %s but leads out of it (%v): set --lease-file or NODEID_LEASE_FILE, or TMPDIR", dir, s.dataRoot, unwrapPath(err))
	}
	d.Close()
	return nil
}

// claimDefaultLeaseFile takes the default lease file for this process: it
// creates $TMPDIR/nodeid-<uid> (mode 0755, a broker that dropped
// privileges still reads it) and locks lease.lock in it for as long as the
// process lives. The directory must be ours and writable by us alone, so
// nobody else on a shared /tmp can plant a file or a symlink there.
//
// A second `run` in the same container or host (the lock is held) gets a
// private directory of its own instead, removed when it exits, and a
// warning: `health` without --lease-file checks the first one's. The stable
// file itself is left in place on exit (its state says released or lost)
// and overwritten by the next run.
func claimDefaultLeaseFile(log *slog.Logger) (path string, cleanup func(), err error) {
	warnNonStickyTempDir(log)
	path = defaultLeasePath()
	dir := filepath.Dir(path)
	reason := ""
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", nil, usagef("lease file: cannot create %s: %v", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return "", nil, usagef("lease file: %s: %v", dir, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		reason = dir + " is not a directory"
	case int(st.Uid) != os.Getuid():
		reason = fmt.Sprintf("%s belongs to uid %d", dir, st.Uid)
	case st.Mode&0o022 != 0:
		reason = dir + " is writable by others"
	}
	if reason == "" {
		f, err := os.OpenFile(filepath.Join(dir, "lease.lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o644)
		if err != nil {
			return "", nil, usagef("lease file: %v", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
			return path, func() { f.Close() }, nil
		}
		f.Close()
		reason = "another nodeid-init run uses it"
	}
	private, err := os.MkdirTemp("", "nodeid-")
	if err == nil {
		err = os.Chmod(private, 0o755)
	}
	if err != nil {
		return "", nil, usagef("lease file: cannot create its directory in %s: %v", os.TempDir(), err)
	}
	// Held open from now on: the cleanup removes what is in this very
	// directory, even if someone renamed it and put a symlink or another
	// directory at its path ($TMPDIR without the sticky bit).
	dirFd, err := unix.Open(private, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(private)
		return "", nil, usagef("lease file: cannot open its directory %s: %v", private, err)
	}
	path = filepath.Join(private, "lease.json")
	log.Warn("default lease file not available, using a private one: nodeid-init health needs --lease-file "+path+" (or NODE_LEASE_FILE)",
		"default", defaultLeasePath(), "reason", reason, "lease_file", path)
	cleanup = func() { removePrivateDir(dirFd, private) }
	return path, cleanup, nil
}

// boundedCleanup runs cleanup (the default lease file's: claimDefaultLeaseFile)
// on its own goroutine and waits for it at most --fs-timeout.
func (sess *session) boundedCleanup(cleanup func()) {
	done := make(chan struct{})
	go func() { defer close(done); cleanup() }()
	timer := time.NewTimer(sess.s.fsBound())
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		sess.log.Warn("default lease file not cleaned up: its file system did not answer", "path", sess.leaseFile, "fs_timeout_seconds", sess.s.fsBound().Seconds())
	}
}

// removePrivateDir removes the private lease directory that dirFd was
// opened on: only the names run writes there (the lease file, the peers
// file and their temporary files), unlinked relative to dirFd, never
// through a path that may have been swapped; then the directory itself,
// only if path still names it (same device and inode, not a symlink).
func removePrivateDir(dirFd int, path string) {
	defer unix.Close(dirFd)
	if d, err := unix.Dup(dirFd); err == nil {
		f := os.NewFile(uintptr(d), path)
		names, _ := f.Readdirnames(-1)
		f.Close()
		for _, name := range names {
			if name == "lease.json" || name == "lease-peers.json" || strings.HasPrefix(name, ".lease-") {
				_ = unix.Unlinkat(dirFd, name, 0)
			}
		}
	}
	var ours, there unix.Stat_t
	if unix.Fstat(dirFd, &ours) != nil || unix.Lstat(path, &there) != nil {
		return
	}
	if there.Mode&unix.S_IFMT == unix.S_IFDIR && there.Dev == ours.Dev && there.Ino == ours.Ino {
		_ = unix.Rmdir(path)
	}
}

// warnNonStickyTempDir warns when $TMPDIR is writable by others without the
// sticky bit: anyone may then rename the lease file's directory and put
// another in its place, and the broker would read whatever is there.
func warnNonStickyTempDir(log *slog.Logger) {
	var st unix.Stat_t
	if err := unix.Stat(os.TempDir(), &st); err == nil && st.Mode&0o002 != 0 && st.Mode&unix.S_ISVTX == 0 {
		log.Warn("$TMPDIR is writable by everyone but not sticky: another user can replace the lease file's directory; set --lease-file (or NODEID_LEASE_FILE) to a file in a directory only this user can write",
			"tmpdir", os.TempDir())
	}
}
