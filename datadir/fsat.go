//go:build unix

package datadir

import (
	"errors"
	"io/fs"
	"os"
	"path"

	"golang.org/x/sys/unix"
)

// Everything under the data root may have been planted by another task with
// our uid. Files are therefore written only through descriptors of
// directories we hold open, and never through an entry that already exists.

// createFile creates name in dir, writes b, and fsyncs the file and dir.
// O_EXCL|O_NOFOLLOW makes any existing entry an error: a planted symlink or
// hard link is never written through.
func createFile(dir *os.File, name string, b []byte) (err error) {
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(markerMode))
	if err != nil {
		return &os.PathError{Op: "create", Path: path.Join(dir.Name(), name), Err: err}
	}
	f := os.NewFile(uintptr(fd), path.Join(dir.Name(), name))
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err := f.Write(b); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return dir.Sync()
}

// replaceFile unlinks name, which unlink(2) does without following a
// symlink, and creates it anew.
func replaceFile(dir *os.File, name string, b []byte) error {
	if err := unlinkAt(dir, name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return createFile(dir, name, b)
}

// unlinkAt removes the non-directory name from dir.
func unlinkAt(dir *os.File, name string) error {
	if err := unix.Unlinkat(int(dir.Fd()), name, 0); err != nil {
		return &os.PathError{Op: "unlinkat", Path: path.Join(dir.Name(), name), Err: err}
	}
	return nil
}
