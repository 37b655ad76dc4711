package datadir

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"time"

	"github.com/nodeid/nodeid/nodeid"
)

// Marker is the content of MarkerName.
type Marker struct {
	// InitializedAt is when the marker was written, by the preparing task's
	// clock; informational only.
	InitializedAt time.Time `json:"initializedAt"`
	// Version is the version of the directory that holds the marker. A marker
	// naming another version (a directory renamed or copied by hand) does not
	// make the directory valid.
	Version nodeid.Version `json:"version"`
	// InitializedFrom is the version the directory was prepared from, or nil
	// if it started empty.
	InitializedFrom *nodeid.Version `json:"initializedFrom"`
}

// errBadMarker marks a marker that is missing, unparseable or for another
// version: the directory is invalid. Other errors (I/O) leave the state
// unknown.
var errBadMarker = errors.New("datadir: no valid marker")

// maxMarkerSize bounds what is read: a real marker is about 100 bytes.
const maxMarkerSize = 4096

// readMarker reads and checks the marker of the version directory dir.
func readMarker(node *os.Root, dir string, v nodeid.Version) (Marker, error) {
	name := path.Join(dir, MarkerName)
	fi, err := node.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return Marker{}, fmt.Errorf("%w: %s missing", errBadMarker, name)
	}
	if err != nil {
		return Marker{}, fmt.Errorf("datadir: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return Marker{}, fmt.Errorf("%w: %s is not a regular file", errBadMarker, name)
	}
	f, err := node.Open(name)
	if err != nil {
		return Marker{}, fmt.Errorf("datadir: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxMarkerSize+1))
	if err != nil {
		return Marker{}, fmt.Errorf("datadir: reading %s: %w", name, err)
	}
	if len(b) > maxMarkerSize {
		return Marker{}, fmt.Errorf("%w: %s is too large", errBadMarker, name)
	}
	// Pointers distinguish a missing field from a zero one: a truncated
	// write must not pass as version 0.
	var w struct {
		InitializedAt   *time.Time      `json:"initializedAt"`
		Version         *nodeid.Version `json:"version"`
		InitializedFrom *nodeid.Version `json:"initializedFrom"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&w); err != nil {
		return Marker{}, fmt.Errorf("%w: %s: %v", errBadMarker, name, err)
	}
	if dec.More() {
		return Marker{}, fmt.Errorf("%w: %s: trailing data", errBadMarker, name)
	}
	if w.Version == nil || w.InitializedAt == nil {
		return Marker{}, fmt.Errorf("%w: %s: missing fields", errBadMarker, name)
	}
	if *w.Version != v {
		return Marker{}, fmt.Errorf("%w: %s names version %d", errBadMarker, name, *w.Version)
	}
	if w.InitializedFrom != nil && *w.InitializedFrom >= v {
		return Marker{}, fmt.Errorf("%w: %s: initializedFrom %d is not below %d", errBadMarker, name, *w.InitializedFrom, v)
	}
	return Marker{InitializedAt: *w.InitializedAt, Version: *w.Version, InitializedFrom: w.InitializedFrom}, nil
}

// writeMarker creates the marker exclusively, so two preparations of the
// same directory cannot both succeed, and syncs it and its directory so that
// the marker survives a crash once writeMarker returns.
func writeMarker(node *os.Root, dir string, m Marker) (err error) {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	f, err := node.OpenFile(path.Join(dir, MarkerName), os.O_WRONLY|os.O_CREATE|os.O_EXCL, markerMode)
	if err != nil {
		return err
	}
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
	return syncDir(node, dir)
}

// syncDir fsyncs a directory, making the entries created in it durable.
func syncDir(node *os.Root, dir string) error {
	d, err := node.Open(dir)
	if err != nil {
		return err
	}
	serr := d.Sync()
	if cerr := d.Close(); serr == nil {
		serr = cerr
	}
	return serr
}
