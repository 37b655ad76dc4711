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
	"strconv"
	"time"

	"github.com/nodeid/nodeid/node"
)

// Marker is the content of MarkerName, in Camunda 8.9's form (see
// MarshalJSON). Camunda parses markers with a default Jackson ObjectMapper,
// which rejects unknown fields and a string initializedAt, and its GC then
// deletes the directory as invalid: add no fields, change no types.
type Marker struct {
	// InitializedAt is when the marker was written, by the preparing task's
	// clock; informational only. Written as integer epoch milliseconds;
	// read as that or as the RFC 3339 string of earlier releases.
	InitializedAt time.Time `json:"initializedAt"`
	// Version is the version of the directory that holds the marker. A marker
	// naming another version (a directory renamed or copied by hand) does not
	// make the directory valid.
	Version node.Version `json:"version"`
	// InitializedFrom is the version the directory was prepared from, or nil
	// if it started empty.
	InitializedFrom *node.Version `json:"initializedFrom"`
}

// Why a version directory has no valid marker: errNoMarker (none at all) or
// errBadMarker (one that is unparseable or for another version). Other
// errors (I/O) leave the state unknown.
var (
	errNoMarker  = errors.New("datadir: no marker")
	errBadMarker = errors.New("datadir: no valid marker")
)

// errBadFile is a small file (marker, in-progress or ownership file) that is
// not a regular file or too large to be one.
var errBadFile = errors.New("not a small regular file")

// maxMarkerSize bounds what is read: a real marker is about 100 bytes.
const maxMarkerSize = 4096

// decodeStrict decodes exactly one JSON value.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

// readMarker reads and checks the marker of the version directory dir.
func readMarker(dir *os.File, v node.Version) (Marker, error) {
	return readMarkerAt(dir, MarkerName, v)
}

// removingName is the marker of a valid directory that garbage collection
// is deleting (removeValid): no marker, yet positively ours.
const removingName = ".directory-initialized.json.nodeid-removing"

// readMarkerAt reads and checks the file file of dir as a marker of v.
func readMarkerAt(dir *os.File, file string, v node.Version) (Marker, error) {
	name := path.Join(dir.Name(), file)
	b, err := readSmallFileAt(dir, file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Marker{}, fmt.Errorf("%w: %s missing", errNoMarker, name)
	case errors.Is(err, errBadFile):
		return Marker{}, fmt.Errorf("%w: %v", errBadMarker, err)
	case err != nil:
		return Marker{}, fmt.Errorf("datadir: %w", err)
	}
	// Pointers distinguish a missing field from a zero one: a truncated
	// write must not pass as version 0.
	var w struct {
		InitializedAt   json.RawMessage `json:"initializedAt"`
		Version         *node.Version   `json:"version"`
		InitializedFrom *node.Version   `json:"initializedFrom"`
	}
	if err := decodeStrict(b, &w); err != nil {
		// Empty, or a prefix of JSON: a crash while the marker was written
		// (Camunda creates it, then writes it). Such a directory was never
		// complete in any format, so it counts as having no marker.
		if torn(b) || errors.Is(err, io.ErrUnexpectedEOF) {
			return Marker{}, fmt.Errorf("%w: %s is incomplete", errNoMarker, name)
		}
		return Marker{}, fmt.Errorf("%w: %s: %v", errBadMarker, name, err)
	}
	if w.Version == nil || w.InitializedAt == nil {
		return Marker{}, fmt.Errorf("%w: %s: missing fields", errBadMarker, name)
	}
	at, err := parseInitializedAt(w.InitializedAt)
	if err != nil {
		return Marker{}, fmt.Errorf("%w: %s: initializedAt: %v", errBadMarker, name, err)
	}
	if *w.Version != v {
		return Marker{}, fmt.Errorf("%w: %s names version %d", errBadMarker, name, *w.Version)
	}
	if w.InitializedFrom != nil && *w.InitializedFrom >= v {
		return Marker{}, fmt.Errorf("%w: %s: initializedFrom %d is not below %d", errBadMarker, name, *w.InitializedFrom, v)
	}
	return Marker{InitializedAt: at, Version: *w.Version, InitializedFrom: w.InitializedFrom}, nil
}

// torn reports whether b is what a crash during a write leaves: nothing
// but white space, or NUL bytes after at most a prefix of JSON. A file
// system that persisted the size before the data (XFS, ext4
// data=writeback, NFS write-behind) reads back NULs where the data did not
// reach the disk. NULs where a JSON value can end, or after what no JSON
// starts with, are not that: the write was complete, or never JSON.
func torn(b []byte) bool {
	p := bytes.TrimRight(b, "\x00")
	if len(bytes.TrimSpace(p)) == 0 {
		return true
	}
	if len(p) == len(b) {
		return false
	}
	var v any
	return errors.Is(json.NewDecoder(bytes.NewReader(p)).Decode(&v), io.ErrUnexpectedEOF)
}

// parseInitializedAt accepts the RFC 3339 string this package writes and the
// integer epoch milliseconds Camunda writes.
func parseInitializedAt(raw json.RawMessage) (time.Time, error) {
	if len(raw) > 0 && raw[0] == '"' {
		var t time.Time
		err := json.Unmarshal(raw, &t)
		return t, err
	}
	ms, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s is neither an RFC 3339 string nor integer epoch milliseconds", raw)
	}
	return time.UnixMilli(ms), nil
}

// MarshalJSON writes the marker exactly as Camunda does:
// {"initializedAt":<epoch ms>,"version":<k>,"initializedFrom":<k'>|null}.
func (m Marker) MarshalJSON() ([]byte, error) {
	ms := m.InitializedAt.UnixMilli()
	// Camunda refuses negative times and versions: such a marker would make
	// its GC delete the directory.
	if ms < 0 || m.Version < 0 || m.InitializedFrom != nil && *m.InitializedFrom < 0 {
		return nil, fmt.Errorf("datadir: marker %+v has a negative time or version", m)
	}
	from := "null"
	if m.InitializedFrom != nil {
		from = strconv.FormatInt(int64(*m.InitializedFrom), 10)
	}
	return fmt.Appendf(nil, `{"initializedAt":%d,"version":%d,"initializedFrom":%s}`, ms, int64(m.Version), from), nil
}

// UnmarshalJSON reads both forms of initializedAt: Camunda's epoch
// milliseconds and the RFC 3339 string of earlier releases. It checks no
// more than the JSON; whether a marker makes its directory valid is for
// Prepare (readMarker) to decide.
func (m *Marker) UnmarshalJSON(b []byte) error {
	var w struct {
		InitializedAt   json.RawMessage `json:"initializedAt"`
		Version         node.Version    `json:"version"`
		InitializedFrom *node.Version   `json:"initializedFrom"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	var at time.Time
	if len(w.InitializedAt) > 0 && string(w.InitializedAt) != "null" {
		var err error
		if at, err = parseInitializedAt(w.InitializedAt); err != nil {
			return fmt.Errorf("initializedAt: %w", err)
		}
	}
	*m = Marker{InitializedAt: at, Version: w.Version, InitializedFrom: w.InitializedFrom}
	return nil
}

// writeMarker creates the marker in the version directory dir exclusively,
// so two preparations of the same directory cannot both succeed, and syncs
// it and dir so that the marker survives a crash once writeMarker returns.
func writeMarker(dir *os.File, m Marker) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return createFile(dir, MarkerName, b)
}
