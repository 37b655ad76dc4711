package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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
// leaves only the data volume writable) must be reached inside it through
// no symlink and no node-N directory (openInside).
func (s *settings) checkTempDirPlacement() error {
	if err := s.checkDataRoot(); err != nil {
		return err
	}
	dir := os.TempDir()
	return s.boundedCheck("placement check of $TMPDIR "+dir, func() error {
		root, rel, err := underDataRoot(dir, s.dataRoot)
		if err != nil || root == nil {
			return nil // not under it; a failure to tell shows again when the outputs are opened
		}
		defer root.Close()
		d, err := openInside(root, rel)
		if err != nil {
			return usagef("lease file: $TMPDIR %s lies under the data root %s, where no symlink is followed and no node-N directory written (%v): set --lease-file or NODEID_LEASE_FILE, or TMPDIR", dir, s.dataRoot, unwrapPath(err))
		}
		d.Close()
		return nil
	})
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
//
// Every step is taken relative to $TMPDIR opened once (tempRoot): under
// the data root from within it, so a symlink planted there after the
// start-up check (checkTempDirPlacement) cannot lead a step out of it.
func claimDefaultLeaseFile(log *slog.Logger, dataRoot string) (path string, cleanup func(), err error) {
	tmp, err := tempRoot(dataRoot)
	if err != nil {
		return "", nil, usagef("lease file: $TMPDIR %s: %v", os.TempDir(), unwrapPath(err))
	}
	defer func() {
		if err != nil {
			tmp.Close()
		}
	}()
	warnNonStickyTempDir(log)
	path = defaultLeasePath()
	dir := filepath.Dir(path)
	base := filepath.Base(dir)
	reason := ""
	if err := tmp.Mkdir(base, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", nil, usagef("lease file: cannot create %s: %v", dir, unwrapPath(err))
	}
	fi, err := tmp.Lstat(base)
	if err != nil {
		return "", nil, usagef("lease file: %s: %v", dir, unwrapPath(err))
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir() || st == nil:
		reason = dir + " is not a directory"
	case int(st.Uid) != os.Getuid():
		reason = fmt.Sprintf("%s belongs to uid %d", dir, st.Uid)
	case st.Mode&0o022 != 0:
		reason = dir + " is writable by others"
	}
	if reason == "" {
		f, err := tmp.OpenFile(filepath.Join(base, "lease.lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o644)
		if err != nil {
			return "", nil, usagef("lease file: %v", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
			tmp.Close()
			return path, func() { f.Close() }, nil
		}
		f.Close()
		reason = "another nodeid-init run uses it"
	}
	var name string
	for range 10 {
		name = "nodeid-" + randomSuffix()
		if err = tmp.Mkdir(name, 0o700); !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err == nil {
		err = tmp.Chmod(name, 0o755)
	}
	if err != nil {
		return "", nil, usagef("lease file: cannot create its directory in %s: %v", os.TempDir(), unwrapPath(err))
	}
	private := filepath.Join(os.TempDir(), name)
	// Held open from now on: the cleanup removes what is in this very
	// directory, even if someone renamed it and put a symlink or another
	// directory at its path ($TMPDIR without the sticky bit).
	d, err := tmp.Open(name)
	var dirFd int
	if err == nil {
		dirFd, err = unix.Dup(int(d.Fd()))
		d.Close()
	}
	if err != nil {
		_ = tmp.Remove(name)
		return "", nil, usagef("lease file: cannot open its directory %s: %v", private, unwrapPath(err))
	}
	unix.CloseOnExec(dirFd)
	path = filepath.Join(private, "lease.json")
	log.Warn("default lease file not available, using a private one: nodeid-init health needs --lease-file "+path+" (or NODE_LEASE_FILE)",
		"default", defaultLeasePath(), "reason", reason, "lease_file", path)
	cleanup = func() { removePrivateDir(dirFd, tmp, name); tmp.Close() }
	return path, cleanup, nil
}

// tempRoot opens $TMPDIR: from within the data root when it lies under it.
func tempRoot(dataRoot string) (*os.Root, error) {
	dir := os.TempDir()
	root, rel, err := underDataRoot(dir, dataRoot)
	if err != nil {
		return nil, err
	}
	if root == nil {
		return os.OpenRoot(dir)
	}
	defer root.Close()
	return openInside(root, rel)
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
// only if its name in tmp ($TMPDIR) still names it (same device and
// inode, not a symlink).
func removePrivateDir(dirFd int, tmp *os.Root, name string) {
	defer unix.Close(dirFd)
	if d, err := unix.Dup(dirFd); err == nil {
		f := os.NewFile(uintptr(d), name)
		names, _ := f.Readdirnames(-1)
		f.Close()
		for _, name := range names {
			if name == "lease.json" || name == "lease-peers.json" || strings.HasPrefix(name, ".lease-") {
				_ = unix.Unlinkat(dirFd, name, 0)
			}
		}
	}
	var ours unix.Stat_t
	if unix.Fstat(dirFd, &ours) != nil {
		return
	}
	fi, err := tmp.Lstat(name)
	if err != nil {
		return
	}
	if there, ok := fi.Sys().(*syscall.Stat_t); ok && fi.IsDir() && there.Dev == ours.Dev && there.Ino == ours.Ino {
		_ = tmp.Remove(name)
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
