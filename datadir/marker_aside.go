//go:build unix

package datadir

import (
	"encoding/json"
	"os"
	"path"

	"golang.org/x/sys/unix"
)

// markerAsideName holds the marker, complete and durable, until the target
// passed its last check (publishMarker). No reader of markers looks at it;
// copies skip it (a crash between its link and its unlink leaves it).
const markerAsideName = ".directory-initialized.json.nodeid-unpublished"

// writeMarkerAside writes m as markerAsideName in dir (O_EXCL|O_NOFOLLOW,
// fsynced). The directory is fsynced once, by publishMarker: the name
// aside need not survive a crash, its content must before it is linked.
func writeMarkerAside(dir *os.File, m Marker) (err error) {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	fd, err := unix.Openat(int(dir.Fd()), markerAsideName, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(markerMode))
	if err != nil {
		return &os.PathError{Op: "create", Path: path.Join(dir.Name(), markerAsideName), Err: err}
	}
	f := os.NewFile(uintptr(fd), path.Join(dir.Name(), markerAsideName))
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err := f.Write(b); err != nil {
		return err
	}
	return syncFile(f)
}

// publishMarker makes the marker written aside the marker of dir:
// linkat(2) fails if MarkerName exists (as O_EXCL would; NFS has no
// renameat2 RENAME_NOREPLACE), then the directory is fsynced. If that
// fsync fails, the marker is removed again (still our inode only).
func publishMarker(dir *os.File) error {
	fd := int(dir.Fd())
	if err := unix.Linkat(fd, markerAsideName, fd, MarkerName, 0); err != nil {
		return &os.LinkError{Op: "linkat", Old: path.Join(dir.Name(), markerAsideName), New: path.Join(dir.Name(), MarkerName), Err: err}
	}
	var aside unix.Stat_t
	asideErr := fstatat(fd, markerAsideName, &aside)
	// A failure is harmless: not a marker, skipped by copies, removed
	// with dir.
	_ = unlinkAt(dir, markerAsideName)
	if err := syncFile(dir); err != nil {
		var st unix.Stat_t
		if asideErr == nil && fstatat(fd, MarkerName, &st) == nil && st.Dev == aside.Dev && st.Ino == aside.Ino {
			_ = unlinkAt(dir, MarkerName)
		}
		return err
	}
	return nil
}
