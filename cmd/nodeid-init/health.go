package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodeid/nodeid/leasefile"
)

// cmdHealth exits 0 when the lease published in the lease file is valid on
// this host's monotonic clock, or when the task is a hot spare waiting for a
// node ID (unless --held); 1 otherwise: an ECS container health check. It
// finds the file as the broker does: --lease-file or NODEID_LEASE_FILE,
// else NODE_LEASE_FILE, else run's default.
func cmdHealth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var heldOnly bool
	s, rest, err := parseSettings(ctx, "health", args, stdout, []string{"lease-file"}, func(fs *flag.FlagSet, s *settings) {
		fs.BoolVar(&heldOnly, "held", false, "exit 1 while the task waits for a node ID (default: a waiting hot spare is healthy)")
	})
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("unexpected arguments %q", rest)
	}
	path := s.leaseFile
	if path == "" {
		path = strings.TrimSpace(os.Getenv("NODE_LEASE_FILE"))
	}
	var l leasefile.Lease
	if path == "" {
		// run's default: trusted only on the terms run uses it.
		path = defaultLeasePath()
		l, err = readDefaultLeaseFile(path)
	} else {
		l, err = leasefile.Read(path)
	}
	if errors.Is(err, leasefile.ErrNoLease) {
		return fmt.Errorf("no lease file %s: is nodeid-init run (or acquire/renew with --lease-file) running in this container? Else set --lease-file or NODEID_LEASE_FILE", path)
	}
	if err != nil {
		return err
	}
	if !l.ThisBoot() {
		return fmt.Errorf("lease file %s was written before this host's last boot (state %s): not valid", path, l.State)
	}
	if err := l.MatchesEnv(); err != nil {
		return fmt.Errorf("%w (%s)", err, path)
	}
	switch l.State {
	case leasefile.StateWaiting:
		if !l.Waiting() {
			return fmt.Errorf("task %s's waiting state is stale: its writer stopped refreshing it, so it stopped or died (%s)", l.TaskID, path)
		}
		if heldOnly {
			return fmt.Errorf("task %s is waiting for a node ID (--held)", l.TaskID)
		}
		fmt.Fprintf(stdout, "task %s is waiting for a node ID (hot spare)\n", l.TaskID)
		return nil
	case leasefile.StateStopped:
		return fmt.Errorf("task %s stopped before it acquired a node ID (%s)", l.TaskID, path)
	}
	if !l.Valid() {
		return fmt.Errorf("lease of node %d v%d is %s and not valid (%s)", l.NodeID, l.Version, l.State, path)
	}
	fmt.Fprintf(stdout, "node %d v%d held by %s, valid for %v\n", l.NodeID, l.Version, l.TaskID, l.Remaining().Round(1e6))
	return nil
}

// readDefaultLeaseFile reads run's default lease file only if its directory
// passes run's own checks (a real directory, not a symlink, owned by this
// user, writable by nobody else) and the file is a regular file of this
// user, not a symlink; both are opened without following symlinks. Else
// the file is someone else's to write: an error.
func readDefaultLeaseFile(path string) (leasefile.Lease, error) {
	dir := filepath.Dir(path)
	refuse := func(why string) (leasefile.Lease, error) {
		return leasefile.Lease{}, fmt.Errorf("default lease file %s not trusted: %s, so run does not use it either (it logged the private lease file it uses instead: give health that path with --lease-file)", path, why)
	}
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return leasefile.Lease{}, leasefile.ErrNoLease
	case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR):
		return refuse(dir + " is a symlink or not a directory")
	case err != nil:
		return leasefile.Lease{}, fmt.Errorf("lease file: %s: %w", dir, err)
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstat(dfd, &st); err != nil {
		return leasefile.Lease{}, fmt.Errorf("lease file: %s: %w", dir, err)
	}
	if int(st.Uid) != os.Getuid() {
		return refuse(fmt.Sprintf("%s belongs to uid %d", dir, st.Uid))
	}
	if st.Mode&0o022 != 0 {
		return refuse(dir + " is writable by others")
	}
	fd, err := unix.Openat(dfd, filepath.Base(path), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return leasefile.Lease{}, leasefile.ErrNoLease
	case errors.Is(err, unix.ELOOP):
		return refuse(path + " is a symlink")
	case err != nil:
		return leasefile.Lease{}, fmt.Errorf("lease file: %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if err := unix.Fstat(fd, &st); err != nil {
		return leasefile.Lease{}, fmt.Errorf("lease file: %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return refuse(path + " is not a regular file")
	}
	if int(st.Uid) != os.Getuid() {
		return refuse(fmt.Sprintf("%s belongs to uid %d", path, st.Uid))
	}
	b, err := io.ReadAll(io.LimitReader(f, 1<<16))
	if err != nil {
		return leasefile.Lease{}, fmt.Errorf("lease file: %s: %w", path, err)
	}
	var l leasefile.Lease
	if err := json.Unmarshal(b, &l); err != nil {
		return leasefile.Lease{}, fmt.Errorf("lease file %s: %w", path, err)
	}
	return l, nil
}
