//go:build unix

package datadir

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// copyData copies the regular file sf into the new, empty file df,
// keeping its holes: only the data segments (SEEK_DATA, SEEK_HOLE) are
// copied, with copy_file_range(2), and the size is set at the end. A file
// system without SEEK_DATA is copied whole, to its end. Each chunk copied
// is a step of progress.
func copyData(df, sf *os.File, st *unix.Stat_t, steps *atomic.Int64) error {
	sfd, dfd := int(sf.Fd()), int(df.Fd())
	if st.Blocks*512 >= st.Size {
		// As many bytes allocated as it has, which blocks preallocated
		// past the end (fallocate KEEP_SIZE) can fake: one SEEK_HOLE
		// tells. A file of at most 4 KiB is copied whole without asking
		// (filled holes cost at most a block).
		whole := st.Size <= 4096
		if !whole {
			hole, err := unix.Seek(sfd, 0, unix.SEEK_HOLE)
			whole = err == nil && hole >= st.Size || err == unix.EINVAL
		}
		if whole {
			off, err := copyRange(df, sf, 0, st.Size, steps)
			if err != nil || off == st.Size {
				return err
			}
			return unix.Ftruncate(dfd, off) // shrank under us
		}
	}
	var off int64
	for {
		data, err := unix.Seek(sfd, off, unix.SEEK_DATA)
		switch {
		case err == unix.ENXIO:
			// No data from off on: the rest, if any, is a hole.
			end, err := unix.Seek(sfd, 0, io.SeekEnd)
			if err != nil {
				return &os.PathError{Op: "lseek", Path: sf.Name(), Err: err}
			}
			if err := unix.Ftruncate(dfd, max(end, off)); err != nil {
				return &os.PathError{Op: "ftruncate", Path: df.Name(), Err: err}
			}
			return nil
		case err == unix.EINVAL && off == 0:
			// SEEK_DATA not supported: copy it all.
			_, err := copyRange(df, sf, 0, math.MaxInt64, steps)
			return err
		case err != nil:
			return &os.PathError{Op: "lseek", Path: sf.Name(), Err: err}
		}
		hole, err := unix.Seek(sfd, data, unix.SEEK_HOLE)
		if err != nil {
			return &os.PathError{Op: "lseek", Path: sf.Name(), Err: err}
		}
		if off, err = copyRange(df, sf, data, hole, steps); err != nil {
			return err
		}
		if off < hole {
			// The file shrank under us: end it there (validation
			// compares sizes).
			return unix.Ftruncate(dfd, off)
		}
	}
}

// copyChunk is the most one copy_file_range(2) call copies: each call is a
// step of progress (Options.Progress), so a file system that moves at
// least 1 MiB per --fs-timeout per worker (17 KiB/s at 60 s) is slow, not
// hung. 16 MiB made a throttled EFS (under 273 KiB/s at 60 s) look hung at
// every attempt; the smaller calls cost a round trip per MiB, nothing next
// to the MiB itself.
const copyChunk = 1 << 20

// copyRange copies [from, to) of sf to the same offsets of df, with
// copy_file_range(2), or pread/pwrite where the kernel refuses it. It
// returns where it stopped: before to only at the end of the source.
func copyRange(df, sf *os.File, from, to int64, steps *atomic.Int64) (int64, error) {
	roff, woff := from, from
	for roff < to {
		n, err := unix.CopyFileRange(int(sf.Fd()), &roff, int(df.Fd()), &woff, int(min(to-roff, copyChunk)), 0)
		step(steps)
		switch {
		case err == unix.EXDEV || err == unix.ENOSYS || err == unix.EOPNOTSUPP || err == unix.EINVAL:
			return copyRangeRW(df, sf, roff, to, steps)
		case err != nil:
			return roff, &os.PathError{Op: "copy_file_range", Path: df.Name(), Err: err}
		case n == 0:
			return roff, nil
		}
	}
	return roff, nil
}

func copyRangeRW(df, sf *os.File, off, to int64, steps *atomic.Int64) (int64, error) {
	buf := make([]byte, min(to-off, 1<<20))
	for off < to {
		n, err := sf.ReadAt(buf[:min(to-off, int64(len(buf)))], off)
		if n > 0 {
			if _, werr := df.WriteAt(buf[:n], off); werr != nil {
				return off, werr
			}
			off += int64(n)
			step(steps)
		}
		if err == io.EOF {
			return off, nil
		}
		if err != nil {
			return off, err
		}
	}
	return off, nil
}

// copyXattrs copies the user.* extended attributes of the file sfd to
// dfd. Other namespaces are not ours to copy: security.* and trusted.*
// need privileges and belong to the system, system.* (ACLs) follow the
// mode we set. A file system without extended attributes has none.
func copyXattrs(sfd, dfd int) error {
	names, err := listXattrs(sfd)
	if err != nil {
		return err
	}
	for _, name := range names {
		if !strings.HasPrefix(name, "user.") {
			continue
		}
		val, err := getXattr(sfd, name)
		if err == unix.ENODATA {
			continue // removed meanwhile
		}
		if err != nil {
			return fmt.Errorf("fgetxattr %s: %w", name, err)
		}
		if err := unix.Fsetxattr(dfd, name, val, 0); err != nil {
			return fmt.Errorf("fsetxattr %s: %w", name, err)
		}
	}
	return nil
}

func listXattrs(fd int) ([]string, error) {
	for {
		n, err := unix.Flistxattr(fd, nil)
		if err == unix.ENOTSUP || n == 0 && err == nil {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("flistxattr: %w", err)
		}
		buf := make([]byte, n)
		m, err := unix.Flistxattr(fd, buf)
		if err == unix.ERANGE {
			continue // grew meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("flistxattr: %w", err)
		}
		var names []string
		for _, b := range bytes.Split(buf[:m], []byte{0}) {
			if len(b) > 0 {
				names = append(names, string(b))
			}
		}
		return names, nil
	}
}

func getXattr(fd int, name string) ([]byte, error) {
	for {
		n, err := unix.Fgetxattr(fd, name, nil)
		if err != nil {
			return nil, err
		}
		buf := make([]byte, n)
		m, err := unix.Fgetxattr(fd, name, buf)
		if err == unix.ERANGE {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:m], nil
	}
}
