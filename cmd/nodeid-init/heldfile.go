package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nodeid/nodeid/leasefile"
)

// heldFile is a file the supervisor replaces during the tenure: the lease
// file, the peers file, a rendered template (also the env file and the
// hand-off, written after a wait for an ID). Its directory is resolved once,
// at start, by the path the operator configured, and held open (os.Root);
// every replacement is made inside that directory, never by walking the
// path again. The path may run through a shared data root: a directory on
// it swapped for a symlink meanwhile must not redirect the write out of it.
type heldFile struct {
	path string // as configured: for logs and errors
	dir  *os.Root
	name string
	tmp  string // prefix of the temporary files, as leasefile names them
}

// errNotRegularOutput is a destination that became a symlink, a directory
// or another non-regular file since start: it is not replaced.
var errNotRegularOutput = errors.New("is no longer a regular file: not replaced")

// openHeldFile opens path's directory, following what the operator
// configured (symlinks included), and holds it.
func openHeldFile(what, path string) (*heldFile, error) {
	dir, err := os.OpenRoot(filepath.Dir(path))
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, usagef("%s %s: cannot open its directory: %v", what, path, err)
	}
	name := filepath.Base(path)
	return &heldFile{path: path, dir: dir, name: name, tmp: "." + name + "."}, nil
}

// close releases the directory; nil-safe. It does not wait for a write in
// flight (os.Root.Close does not).
func (h *heldFile) close() {
	if h != nil {
		_ = h.dir.Close()
	}
}

// replace replaces the file atomically with data and mode, as
// leasefile.WriteFile does (temporary file created with O_EXCL, written,
// chmod, fsync if durable, rename), all relative to the held directory.
// A final name that is not a regular file (a symlink planted there) is
// refused: rename would replace the link, but nobody configured one.
func (h *heldFile) replace(data []byte, mode os.FileMode, durable bool) error {
	if fi, err := h.dir.Lstat(h.name); err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("%s %w", h.path, errNotRegularOutput)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	var f *os.File
	var tmp string
	var err error
	for range 10 {
		tmp = h.tmp + randomSuffix()
		f, err = h.dir.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return err
	}
	renamed := false
	defer func() {
		if !renamed {
			_ = h.dir.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if durable {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := h.dir.Rename(tmp, h.name); err != nil {
		return err
	}
	renamed = true
	return nil
}

// writeFile is leasefile.WriteFile into the held directory: synced before
// the rename.
func (h *heldFile) writeFile(data []byte, mode os.FileMode) error {
	return h.replace(data, mode, true)
}

// writeLease is leasefile.Write into the held directory: the same bytes
// and temporary names, not synced (it is rewritten at every renewal).
func (h *heldFile) writeLease(l leasefile.Lease) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	if err := h.replace(append(b, '\n'), 0o644, false); err != nil {
		return fmt.Errorf("lease file: %w", err)
	}
	return nil
}

// openLeaseFile is openHeldFile for a lease file: its temporary files are
// named as leasefile.Write names them (.lease-*), which the cleanup of a
// private default directory removes.
func openLeaseFile(path string) (*heldFile, error) {
	h, err := openHeldFile("lease file", path)
	if err == nil {
		h.tmp = ".lease-"
	}
	return h, err
}

func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// setLeaseFile makes path (or none, "") the lease file this session
// writes, its directory held from now on.
func (sess *session) setLeaseFile(path string) error {
	sess.leaseFile = path
	if path == "" {
		return nil
	}
	h, err := openLeaseFile(path)
	if err != nil {
		return err
	}
	sess.leaseOut = h
	return nil
}

// closeOutputs releases the held directories (never on the way to a kill:
// it runs when the command returns).
func (sess *session) closeOutputs() {
	sess.leaseOut.close()
	sess.peersOut.close()
	for _, t := range sess.s.templates {
		t.out.close()
	}
}
