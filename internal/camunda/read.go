package camunda

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Metadata keys of a lease object, lowercase as S3 returns user metadata.
const (
	MetaTaskID     = "taskid"
	MetaVersion    = "version"
	MetaAcquirable = "acquirable"
)

// ErrUnreadable wraps every error the readers return: Camunda would throw
// on such an object (for a lease, its acquire loop then skips the node ID).
var ErrUnreadable = errors.New("camunda: unreadable")

// Stored is a lease object as Camunda's StoredLease sees it.
type Stored struct {
	// Initialized is false for a lease no node holds: a zero-length body,
	// or a body that is the JSON literal null (Jackson reads it as a null
	// Lease).
	Initialized bool
	// Version is the node-ID version: from the body when Initialized, else
	// from the metadata (0 when the object has no metadata).
	Version int64
	// Acquirable is false when the node ID was scaled down. Objects
	// without the metadata key (or without metadata) are acquirable.
	Acquirable bool

	// The fields below are set only when Initialized.
	TaskID string
	NodeID int32
	// Expiry is the lease's timestamp in epoch milliseconds; the lease is
	// valid while the reader's wall clock is <= Expiry.
	Expiry int64
	// Known is knownVersionMappings.mappingsByNodeId; nil when the body
	// has no such map (or null). A nil *int64 is a null value.
	Known map[int32]*int64
}

// ValidAt reports whether Camunda, reading the lease at nowMillis by its own
// clock, considers it held.
func (s Stored) ValidAt(nowMillis int64) bool { return s.Initialized && nowMillis <= s.Expiry }

// String is the one-line form also printed by jackson/StrictCheck.java, so
// the two can be compared.
func (s Stored) String() string {
	if !s.Initialized {
		return fmt.Sprintf("Uninitialized v%d acquirable=%t", s.Version, s.Acquirable)
	}
	var known strings.Builder
	known.WriteByte('{')
	if s.Known == nil {
		known.WriteString("null")
	}
	for i, k := range slices.Sorted(maps.Keys(s.Known)) {
		if i > 0 {
			known.WriteByte(',')
		}
		v := "null"
		if s.Known[k] != nil {
			v = strconv.FormatInt(*s.Known[k], 10)
		}
		fmt.Fprintf(&known, "%d:%s", k, v)
	}
	known.WriteByte('}')
	return fmt.Sprintf("Initialized task=%s node=%d v%d ts=%d acquirable=%t known=%s",
		jsonString(s.TaskID), s.NodeID, s.Version, s.Expiry, s.Acquirable, known.String())
}

// jsonString quotes s as Jackson does (no HTML escaping).
func jsonString(s string) string {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	_ = e.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

// DirInfo is the data-directory marker directory-initialized.json.
type DirInfo struct {
	// Null is set when the marker is the JSON literal null: Jackson returns
	// a null object, which Camunda would then dereference.
	Null          bool
	InitializedAt int64
	Version       int64
	// InitializedFrom is the version the directory was copied from, nil
	// for a first initialization.
	InitializedFrom *int64
}

// String is the one-line form also printed by jackson/StrictCheck.java.
func (d DirInfo) String() string {
	if d.Null {
		return "Dir null"
	}
	from := "null"
	if d.InitializedFrom != nil {
		from = strconv.FormatInt(*d.InitializedFrom, 10)
	}
	return fmt.Sprintf("Dir at=%d v%d from=%s", d.InitializedAt, d.Version, from)
}

// ReadLease reads a lease object (its body and user metadata, keys as S3
// returns them) by Camunda's rules, in Camunda's order: the body is parsed
// if non-empty, then the metadata, then the two are combined.
func ReadLease(body []byte, meta map[string]string) (Stored, error) {
	var l *jLease
	if len(body) > 0 {
		var err error
		if l, err = parseLease(body); err != nil {
			return Stored{}, fmt.Errorf("%w: lease body: %w", ErrUnreadable, err)
		}
	}
	md, err := readMetadata(meta)
	if err != nil {
		return Stored{}, fmt.Errorf("%w: %w", ErrUnreadable, err)
	}
	if l == nil {
		s := Stored{Acquirable: true}
		if md != nil {
			s.Version, s.Acquirable = md.version, md.acquirable
		}
		return s, nil
	}
	switch {
	case md == nil:
		return Stored{}, fmt.Errorf("%w: a held lease without metadata", ErrUnreadable)
	case md.task != l.taskID:
		// An absent or empty taskid never matches: the body's taskId is
		// never empty.
		return Stored{}, fmt.Errorf("%w: taskid in metadata (%q) and in lease (%q) do not match", ErrUnreadable, md.task, l.taskID)
	case l.version == nil || *l.version != md.version:
		return Stored{}, fmt.Errorf("%w: version in metadata (%d) and in lease (%s) do not match", ErrUnreadable, md.version, fmtOpt(l.version))
	}
	return Stored{
		Initialized: true,
		Version:     *l.version,
		Acquirable:  md.acquirable,
		TaskID:      l.taskID,
		NodeID:      l.nodeID,
		Expiry:      l.timestamp,
		Known:       l.known,
	}, nil
}

func fmtOpt(v *int64) string {
	if v == nil {
		return "null"
	}
	return strconv.FormatInt(*v, 10)
}

type metadata struct {
	task       string // "" when absent
	version    int64
	acquirable bool
}

// readMetadata is Camunda's Metadata.fromMap: no metadata at all is nil;
// otherwise version is required (Long.parseLong, non-negative), an empty
// taskid is no task, and acquirable defaults to true and is otherwise
// Boolean.parseBoolean (case-insensitive "true"). Other keys are ignored.
func readMetadata(meta map[string]string) (*metadata, error) {
	if len(meta) == 0 {
		return nil, nil
	}
	v, ok := meta[MetaVersion]
	if !ok {
		return nil, fmt.Errorf("metadata %v: no %s", meta, MetaVersion)
	}
	n, err := javaParseInt(v, 64)
	if err != nil {
		return nil, fmt.Errorf("metadata %s: %w", MetaVersion, err)
	}
	if n < 0 {
		return nil, fmt.Errorf("metadata %s %d: negative", MetaVersion, n)
	}
	md := &metadata{task: meta[MetaTaskID], version: n, acquirable: true}
	if a, ok := meta[MetaAcquirable]; ok {
		md.acquirable = strings.EqualFold(a, "true")
	}
	return md, nil
}

// ReadDirectoryMarker reads directory-initialized.json as Camunda's
// DirectoryInitializationInfo.
func ReadDirectoryMarker(b []byte) (DirInfo, error) {
	p, err := newParser(b)
	if err != nil {
		return DirInfo{}, fmt.Errorf("%w: directory marker: %w", ErrUnreadable, err)
	}
	var d DirInfo
	var version *int64
	null, err := p.record([]string{"initializedAt", "version", "initializedFrom"}, func(name string) error {
		var err error
		switch name {
		case "initializedAt":
			d.InitializedAt, err = p.primitive(64)
		case "version":
			version, err = p.version()
		case "initializedFrom":
			d.InitializedFrom, err = p.version()
		}
		return err
	})
	if err == nil && !null {
		switch {
		case d.InitializedAt < 0:
			err = errors.New("initializedAt cannot be negative")
		case version == nil:
			err = errors.New("version cannot be null")
		default:
			d.Version = *version
		}
	}
	if err == nil {
		err = p.done()
	}
	if err != nil {
		return DirInfo{}, fmt.Errorf("%w: directory marker: %w", ErrUnreadable, err)
	}
	d.Null = null
	return d, nil
}

// jLease is the body of a held lease.
type jLease struct {
	taskID    string
	timestamp int64
	nodeID    int32
	version   *int64
	known     map[int32]*int64
}

// parseLease reads a non-empty body as Jackson reads Camunda's Lease
// record. It returns nil for the literal null.
func parseLease(body []byte) (*jLease, error) {
	p, err := newParser(body)
	if err != nil {
		return nil, err
	}
	var l jLease
	var taskID *string
	haveNode, haveKnown := false, false
	null, err := p.record([]string{"taskId", "timestamp", "nodeInstance", "knownVersionMappings"}, func(name string) error {
		var err error
		switch name {
		case "taskId":
			taskID, err = p.str()
		case "timestamp":
			l.timestamp, err = p.primitive(64)
		case "nodeInstance":
			var id int64
			var null bool
			l.version = nil
			null, err = p.record([]string{"id", "version"}, func(name string) error {
				var err error
				if name == "id" {
					id, err = p.primitive(32)
				} else {
					l.version, err = p.version()
				}
				return err
			})
			if err == nil && !null && id < 0 {
				err = fmt.Errorf("nodeInstance id %d is negative", id)
			}
			l.nodeID, haveNode = int32(id), !null
		case "knownVersionMappings":
			var null bool
			l.known = nil
			null, err = p.record([]string{"mappingsByNodeId"}, func(string) error {
				var err error
				l.known, err = p.versionMap()
				return err
			})
			haveKnown = !null
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := p.done(); err != nil {
		return nil, err
	}
	if null {
		return nil, nil
	}
	switch {
	case taskID == nil:
		return nil, errors.New("taskId cannot be null")
	case *taskID == "":
		return nil, errors.New("taskId cannot be empty")
	case !haveNode:
		return nil, errors.New("nodeInstance cannot be null")
	case !haveKnown:
		return nil, errors.New("knownVersionMappings cannot be null")
	}
	l.taskID = *taskID
	return &l, nil
}

// parser walks one JSON value with Jackson's default-ObjectMapper rules.
// Like ObjectMapper.readValue it reads only the first value: whatever
// follows it (whitespace, garbage, another value) is never looked at.
type parser struct {
	src []byte
	d   *json.Decoder
}

func newParser(b []byte) (*parser, error) {
	// Jackson detects and skips a UTF-8 byte order mark.
	b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf"))
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return &parser{src: b, d: d}, nil
}

// done checks what Go's decoder does not: Jackson rejects invalid UTF-8
// inside the value it read (Go would substitute U+FFFD).
func (p *parser) done() error {
	if !utf8.Valid(p.src[:p.d.InputOffset()]) {
		return errors.New("invalid UTF-8")
	}
	return nil
}

func (p *parser) token() (json.Token, error) {
	t, err := p.d.Token()
	if err == io.EOF {
		return nil, errors.New("no content to map due to end-of-input")
	}
	if err != nil {
		return nil, fmt.Errorf("json: %w", err)
	}
	return t, nil
}

// record reads an object whose members are exactly fields (a Java record
// read through its canonical constructor), calling member for each; it
// reports null for the JSON literal null. Jackson 2.14 builds the record as
// soon as every field has been seen: a member after that point (a
// duplicate) fails, while a duplicate before it overrides the earlier
// value. Any other JSON value than an object or null (a string, even
// empty, a number, an array) is an error.
func (p *parser) record(fields []string, member func(name string) error) (null bool, err error) {
	t, err := p.token()
	if err != nil {
		return false, err
	}
	if t == nil {
		return true, nil
	}
	if t != json.Delim('{') {
		return false, fmt.Errorf("cannot read %v as an object", t)
	}
	seen := map[string]bool{}
	for {
		t, err := p.token()
		if err != nil {
			return false, err
		}
		if t == json.Delim('}') {
			return false, nil
		}
		name := t.(string) // the decoder only returns strings as object keys
		if !slices.Contains(fields, name) {
			return false, fmt.Errorf("unrecognized field %q", name)
		}
		if len(seen) == len(fields) {
			return false, fmt.Errorf("field %q after the record was complete", name)
		}
		seen[name] = true
		if err := member(name); err != nil {
			return false, fmt.Errorf("%s: %w", name, err)
		}
	}
}

// str reads a java.lang.String: a string, or the text of a number or
// boolean as written; nil for null.
func (p *parser) str() (*string, error) {
	t, err := p.token()
	if err != nil {
		return nil, err
	}
	var s string
	switch v := t.(type) {
	case nil:
		return nil, nil
	case string:
		s = v
	case json.Number:
		s = v.String()
	case bool:
		s = strconv.FormatBool(v)
	default:
		return nil, fmt.Errorf("cannot read %v as a string", t)
	}
	return &s, nil
}

// primitive reads a Java long (bits 64) or int (bits 32) field: null is 0,
// a float is truncated if in range, a string is trimmed and then "" and
// "null" are 0 and anything else must satisfy Long.parseLong.
func (p *parser) primitive(bits int) (int64, error) {
	t, err := p.token()
	if err != nil {
		return 0, err
	}
	switch v := t.(type) {
	case nil:
		return 0, nil
	case json.Number:
		return number(v, bits)
	case string:
		s := javaTrim(v)
		if s == "" || s == "null" {
			return 0, nil
		}
		return javaParseInt(s, bits)
	}
	return 0, fmt.Errorf("cannot read %v as a %d-bit integer", t, bits)
}

// number converts a JSON number to a Java integer. Integer literals must
// fit; other literals are parsed as a double, rejected beyond the range and
// truncated (Jackson's ACCEPT_FLOAT_AS_INT, on by default).
func number(n json.Number, bits int) (int64, error) {
	s := n.String()
	if !strings.ContainsAny(s, ".eE") {
		v, err := strconv.ParseInt(s, 10, bits)
		if err != nil {
			return 0, fmt.Errorf("numeric value %s out of range: %w", s, err)
		}
		return v, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if math.IsInf(f, 0) {
		return 0, fmt.Errorf("numeric value %s out of range: %w", s, err)
	}
	// Jackson compares with the double nearest to the limit: for a long,
	// 2^63 itself passes and saturates.
	lo, hi := float64(math.MinInt32), float64(math.MaxInt32)
	if bits == 64 {
		lo, hi = float64(math.MinInt64), float64(math.MaxInt64)
	}
	if f < lo || f > hi {
		return 0, fmt.Errorf("numeric value %s out of range", s)
	}
	if bits == 64 && f >= hi {
		return math.MaxInt64, nil
	}
	return int64(f), nil
}

// version reads Camunda's Version (a long through a delegating creator,
// never negative): nil for null; an integer literal; a string that is not
// blank, trimmed, by Long.parseLong. Floats and booleans are errors.
func (p *parser) version() (*int64, error) {
	t, err := p.token()
	if err != nil {
		return nil, err
	}
	var v int64
	switch x := t.(type) {
	case nil:
		return nil, nil
	case json.Number:
		if strings.ContainsAny(x.String(), ".eE") {
			return nil, fmt.Errorf("cannot read a Version from the float %s", x)
		}
		v, err = number(x, 64)
	case string:
		s := javaTrim(x)
		if s == "" {
			return nil, fmt.Errorf("cannot read a Version from a blank string")
		}
		v, err = javaParseInt(s, 64)
	default:
		return nil, fmt.Errorf("cannot read %v as a Version", t)
	}
	if err != nil {
		return nil, err
	}
	if v < 0 {
		return nil, fmt.Errorf("version %d must be non-negative", v)
	}
	return &v, nil
}

// versionMap reads SortedMap<Integer, Version>: nil for null; keys by
// Integer.parseInt, a repeated key keeps the last value.
func (p *parser) versionMap() (map[int32]*int64, error) {
	t, err := p.token()
	if err != nil {
		return nil, err
	}
	if t == nil {
		return nil, nil
	}
	if t != json.Delim('{') {
		return nil, fmt.Errorf("cannot read %v as a map", t)
	}
	m := map[int32]*int64{}
	for {
		t, err := p.token()
		if err != nil {
			return nil, err
		}
		if t == json.Delim('}') {
			return m, nil
		}
		k, err := javaParseInt(t.(string), 32)
		if err != nil {
			return nil, fmt.Errorf("map key: %w", err)
		}
		v, err := p.version()
		if err != nil {
			return nil, fmt.Errorf("map value of %d: %w", k, err)
		}
		m[int32(k)] = v
	}
}
