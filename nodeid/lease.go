package nodeid

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// User-metadata keys of a lease object (S3 returns them lowercased). The
// first three are Camunda's and mean the same there; Camunda ignores the
// others.
const (
	MetaTaskID     = "taskid"
	MetaVersion    = "version"
	MetaAcquirable = "acquirable"
	// MetaForced marks a release written by an operator (release --force)
	// rather than by the holder: its successor copies instead of linking.
	MetaForced = "forced"
	// MetaNonce repeats the write's nonce for people and HEAD requests; the
	// body's copy is the one that counts (see nonce.go).
	MetaNonce = "nonce"
	// MetaLeaseDuration is the writer's lease duration in milliseconds.
	MetaLeaseDuration = "leaseduration"
	// MetaWriter names the task that wrote a released or never-held lease,
	// or a held one on its holder's behalf (scale's marks).
	MetaWriter = "writer"
)

// MaxLeaseBodySize bounds what is read from a lease object: a real lease is a
// few hundred bytes, anything larger is not ours.
const MaxLeaseBodySize = 64 << 10

// Lease is the content of one lease object <prefix><id>.json.
//
// A held lease names its holder in TaskID. A released (or never held) lease
// has an empty taskid in its metadata and keeps its version, so the next
// holder continues from it.
//
// Every write of an object carries a fresh Nonce in its body. S3's ETag of a
// plain PUT is the MD5 of the body, so identical bodies would share an ETag,
// and an If-Match judged on one state would land on a later, different state
// with the same body (the ABA problem). With a nonce in every body no two
// writes of an object share an ETag, and a compare-and-swap on the ETag is a
// compare-and-swap on the whole history.
//
// The object is what Camunda 8.9's provider writes and reads (docs/design.md,
// "The lease object, field by field"): a held body is exactly Camunda's JSON
// document, a released one is the JSON literal null (Camunda: no lease), and
// what only this tool needs (nonce, lease duration, writer) is in user
// metadata and in whitespace after the JSON value, where Camunda's strict
// parser does not look.
type Lease struct {
	// TaskID identifies the holder; empty when released.
	TaskID string
	// Writer is the task that wrote a released or never-held lease (the
	// releaser, the bootstrapper, the operator's tool). In a held lease it
	// is set only by a writer other than the holder (scale marking it), so
	// the object no longer says that its holder is alive (Placeholder).
	Writer string
	// Instance is the node ID and the version (fencing token) of this tenure.
	Instance NodeInstance
	// Expires is the holder's wall-clock estimate of its expiry, written as
	// the body's timestamp (zero for a released lease). No decision of this
	// tool reads it, because another machine's wall clock is not ours;
	// Camunda's provider does, which is why it must not be early.
	Expires time.Time
	// Duration is the holder's lease duration; waiters use the larger of it
	// and their own. Zero when the writer did not record one (Camunda).
	Duration time.Duration
	// Nonce is fresh in every write, so every write changes the ETag and a
	// writer can recognise its own write after a lost answer. Empty in
	// objects of other writers (Camunda).
	Nonce string
	// KnownVersions is the writer's view of every node's version.
	KnownVersions VersionMappings
	// Address is where the holder can be reached (host or host:port),
	// published with every write of a held lease; empty when released.
	Address string
	// Acquirable is false for IDs removed by a scale-down.
	Acquirable bool
	// Forced marks a released lease written by an operator, not by its
	// holder: nothing proves the holder stopped writing.
	Forced bool
	// Legacy marks a lease read from an empty body: a release or a bootstrap
	// by Camunda's provider or an older version of this tool. Every empty
	// object has the same ETag, so such a state proves nothing about what
	// happened before it; a successor waits and copies rather than
	// hard-links after it.
	Legacy bool
}

// Held reports whether the lease names a holder.
func (l Lease) Held() bool { return l.TaskID != "" }

// Placeholder reports whether a held lease stands for no live holder: an
// expiring lease written on behalf of an unknown holder (recreatedPrefix:
// created by scale or a non-fresh bootstrap, or recreated after a delete),
// or one written over its holder by another task (scale's mark, after which
// the holder's next renewal fails). It still blocks takers until it
// expires, but nobody behind it answers.
func (l Lease) Placeholder() bool {
	return l.Held() && (strings.HasPrefix(l.TaskID, recreatedPrefix) || l.Writer != "")
}

// Foreign reports whether a held lease was written by another tool
// (Camunda's provider): it carries no nonce and no lease duration.
func (l Lease) Foreign() bool { return l.Held() && l.Nonce == "" && l.Duration == 0 }

// releasedSizeQuantum: the body of a released or never-held lease is padded
// with spaces to a multiple of this size, and a held body never is. A listing
// shows sizes but not contents, so a waiting task reads (GET) only the slots
// whose size says "maybe released" or that look expired; the GET decides, the
// size is only a hint. JSON parsers ignore the padding.
const releasedSizeQuantum = 512

// sizeSuggestsReleased reports whether an object of this size may hold a
// released lease: an empty (legacy) body or a padded one.
func sizeSuggestsReleased(size int64) bool {
	return size == 0 || size%releasedSizeQuantum == 0
}

// leaseBody is the JSON body of a held lease: Camunda's document, field for
// field. Nonce and LeaseDurationMs are only read, from bodies written by
// earlier versions of this tool; Camunda rejects them, so they are never
// written.
type leaseBody struct {
	TaskID               *string          `json:"taskId"`
	Timestamp            *int64           `json:"timestamp"`
	NodeInstance         *NodeInstance    `json:"nodeInstance"`
	KnownVersionMappings *VersionMappings `json:"knownVersionMappings,omitempty"`
	Nonce                string           `json:"nonce,omitempty"`
	LeaseDurationMs      int64            `json:"leaseDurationMs,omitempty"`
}

// releasedBody is the JSON value of a released or never-held lease: Camunda's
// parser reads null as "no lease", the same as its own empty release, but
// null leaves room for the nonce after it, which an empty body does not.
const releasedBody = "null"

// Encode returns the object body and user metadata for l.
func (l Lease) Encode() ([]byte, map[string]string) {
	meta := map[string]string{
		MetaTaskID:     l.TaskID,
		MetaVersion:    strconv.FormatInt(int64(l.Instance.Version), 10),
		MetaAcquirable: strconv.FormatBool(l.Acquirable),
	}
	if l.Nonce != "" {
		meta[MetaNonce] = l.Nonce
	}
	if l.Duration > 0 {
		meta[MetaLeaseDuration] = strconv.FormatInt(l.Duration.Milliseconds(), 10)
	}
	if l.Held() && l.Address != "" {
		meta[MetaAddress] = l.Address
	}
	if l.Held() {
		// Always written, so that no earlier writer's key survives (some
		// servers keep metadata a PUT does not name).
		meta[MetaWriter] = cmp.Or(l.Writer, l.TaskID)
	}
	if !l.Held() {
		if l.Forced {
			meta[MetaForced] = "true"
		}
		if l.Writer != "" {
			meta[MetaWriter] = l.Writer
		}
		body := appendNonce([]byte(releasedBody), l.Nonce)
		pad := (releasedSizeQuantum - len(body)%releasedSizeQuantum) % releasedSizeQuantum
		return append(body, bytes.Repeat([]byte{' '}, pad)...), meta
	}
	ts := l.Expires.UnixMilli()
	inst := l.Instance
	known := l.KnownVersions
	if known == nil {
		known = VersionMappings{}
	}
	task := l.TaskID
	body, err := json.Marshal(leaseBody{
		TaskID:               &task,
		Timestamp:            &ts,
		NodeInstance:         &inst,
		KnownVersionMappings: &known,
	})
	if err != nil {
		// Only maps with int keys and plain values are marshalled: this
		// cannot fail, and a lease we cannot write is a programming error.
		panic(fmt.Sprintf("nodeid: encode lease: %v", err))
	}
	body = appendNonce(body, l.Nonce)
	if len(body)%releasedSizeQuantum == 0 {
		body = append(body, ' ')
	}
	return body, meta
}

// corruptLeaseError is ErrCorruptLease with what the object's metadata still
// said. A holder puts its version back over a corrupt object only when that
// metadata names no scale-down and no later version (restorableOver).
type corruptLeaseError struct {
	id             int
	reason         string
	metaVersion    Version // 0 when unreadable
	markedUnusable bool    // acquirable=false
}

func (e *corruptLeaseError) Error() string {
	return fmt.Sprintf("%v: node %d: %s", ErrCorruptLease, e.id, e.reason)
}

func (e *corruptLeaseError) Is(target error) bool { return target == ErrCorruptLease }

// restorableOver reports whether a holder of inst may write its version back
// over the corrupt object that err describes: not when the metadata left in
// it records a scale-down (the operator's decision) or a version above inst's
// (a later holder's, who restores its own).
func restorableOver(err error, inst NodeInstance) bool {
	var c *corruptLeaseError
	if !errors.As(err, &c) {
		return true
	}
	return !c.markedUnusable && c.metaVersion <= inst.Version
}

// DecodeLease parses the object of node id. It never panics; anything that is
// not a well-formed lease of this id, with body and metadata agreeing, is
// reported as ErrCorruptLease.
//
// It reads every form Camunda 8.9's provider writes (an empty body without
// metadata from its bootstrap, an empty body with metadata from its release,
// its held JSON) and every form this tool wrote before (nonce and lease
// duration as body fields, released leases as padded JSON).
func DecodeLease(id int, body []byte, meta map[string]string) (Lease, error) {
	seen := &corruptLeaseError{id: id} // what the metadata said, as far as it was read
	corrupt := func(format string, args ...any) (Lease, error) {
		seen.reason = fmt.Sprintf(format, args...)
		return Lease{}, seen
	}
	m := make(map[string]string, len(meta))
	for k, v := range meta {
		m[strings.ToLower(k)] = v
	}
	if len(body) > MaxLeaseBodySize {
		return corrupt("body of %d bytes is too large", len(body))
	}
	empty := len(bytes.TrimSpace(body)) == 0
	if empty && len(m) == 0 {
		// Camunda's bootstrap: created with no metadata, never held.
		return Lease{Instance: NodeInstance{ID: id}, Acquirable: true, Legacy: true}, nil
	}
	versionText, ok := m[MetaVersion]
	if !ok {
		return corrupt("metadata %q missing", MetaVersion)
	}
	version, err := strconv.ParseInt(versionText, 10, 64)
	if err != nil || version < 0 || Version(version) > MaxVersion {
		return corrupt("metadata %s=%q is not a version", MetaVersion, versionText)
	}
	seen.metaVersion = Version(version)
	acquirable := true // missing means true, as in Camunda's format
	if a, ok := m[MetaAcquirable]; ok {
		if acquirable, err = strconv.ParseBool(a); err != nil {
			return corrupt("metadata %s=%q is not a boolean", MetaAcquirable, a)
		}
	}
	seen.markedUnusable = !acquirable
	metaTask := m[MetaTaskID]
	forced := false
	if f, ok := m[MetaForced]; ok {
		if forced, err = strconv.ParseBool(f); err != nil {
			return corrupt("metadata %s=%q is not a boolean", MetaForced, f)
		}
	}
	var duration time.Duration
	if d, ok := m[MetaLeaseDuration]; ok {
		ms, err := strconv.ParseInt(d, 10, 64)
		if err != nil || ms < 0 {
			return corrupt("metadata %s=%q is not a duration in milliseconds", MetaLeaseDuration, d)
		}
		duration = time.Duration(ms) * time.Millisecond
	}
	inst := NodeInstance{ID: id, Version: Version(version)}

	if empty {
		if metaTask != "" {
			return corrupt("empty body but metadata %s=%q", MetaTaskID, metaTask)
		}
		return Lease{Instance: inst, Acquirable: acquirable, Legacy: true, Forced: forced, Writer: m[MetaWriter], Duration: duration}, nil
	}

	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return corrupt("body: %v", err)
	}
	nonce, err := readNonce(body[dec.InputOffset():])
	if err != nil {
		return corrupt("body: %v", err)
	}
	if string(raw) == releasedBody {
		if metaTask != "" {
			return corrupt("released body but metadata %s=%q", MetaTaskID, metaTask)
		}
		return Lease{Instance: inst, Acquirable: acquirable, Forced: forced, Writer: m[MetaWriter], Duration: duration, Nonce: nonce}, nil
	}

	var b leaseBody
	dec = json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return corrupt("body: %v", err)
	}
	held := metaTask != ""
	switch {
	case b.TaskID == nil || *b.TaskID == "":
		return corrupt("body: taskId missing")
	case b.Timestamp == nil:
		return corrupt("body: timestamp missing")
	case b.NodeInstance == nil:
		return corrupt("body: nodeInstance missing")
	case b.NodeInstance.ID != id:
		return corrupt("body: nodeInstance.id %d in the object of node %d", b.NodeInstance.ID, id)
	case b.NodeInstance.Version < 0 || b.NodeInstance.Version > MaxVersion:
		return corrupt("body: nodeInstance.version %d out of range", b.NodeInstance.Version)
	case held && b.NodeInstance.Version < 1:
		return corrupt("body: nodeInstance.version %d, a held lease has version >= 1", b.NodeInstance.Version)
	case int64(b.NodeInstance.Version) != version:
		return corrupt("body version %d but metadata %s=%d", b.NodeInstance.Version, MetaVersion, version)
	case held && *b.TaskID != metaTask:
		return corrupt("body taskId %q but metadata %s=%q", *b.TaskID, MetaTaskID, metaTask)
	case b.LeaseDurationMs < 0:
		return corrupt("body: negative leaseDurationMs")
	}
	if nonce == "" {
		nonce = b.Nonce // written by an earlier version of this tool
	}
	if duration == 0 {
		duration = time.Duration(b.LeaseDurationMs) * time.Millisecond
	}
	l := Lease{
		Instance:   *b.NodeInstance,
		Expires:    time.UnixMilli(*b.Timestamp),
		Duration:   duration,
		Nonce:      nonce,
		Acquirable: acquirable,
		Forced:     forced && !held,
	}
	if held {
		l.TaskID = *b.TaskID
		l.Address = m[MetaAddress] // checked where it is used (ValidateAddress)
		if w := m[MetaWriter]; w != l.TaskID {
			l.Writer = w // written over its holder (Placeholder)
		}
	} else {
		// A released lease as earlier versions wrote it: the body named
		// its writer.
		l.Writer = *b.TaskID
	}
	if b.KnownVersionMappings != nil {
		l.KnownVersions = *b.KnownVersionMappings
	}
	return l, nil
}

// LeaseKey is the object key of node id.
func LeaseKey(prefix string, id int) string {
	return prefix + strconv.Itoa(id) + ".json"
}

// ParseLeaseKey returns the node ID of a lease key, or false for any other
// key (another cluster's, the probe's, a stray upload).
func ParseLeaseKey(prefix, key string) (int, bool) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return 0, false
	}
	name, ok := strings.CutSuffix(rest, ".json")
	if !ok {
		return 0, false
	}
	id, err := parseNodeID(name)
	if err != nil {
		return 0, false
	}
	return id, true
}
