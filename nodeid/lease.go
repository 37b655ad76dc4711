package nodeid

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// User-metadata keys of a lease object (S3 returns them lowercased).
const (
	MetaTaskID     = "taskid"
	MetaVersion    = "version"
	MetaAcquirable = "acquirable"
	// MetaForced marks a release written by an operator (release --force)
	// rather than by the holder: its successor copies instead of linking.
	MetaForced = "forced"
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
type Lease struct {
	// TaskID identifies the holder; empty when released.
	TaskID string
	// Writer is the task that wrote a released or never-held lease (the
	// releaser, the bootstrapper, the operator's tool). Informational.
	Writer string
	// Instance is the node ID and the version (fencing token) of this tenure.
	Instance NodeInstance
	// Expires is the holder's wall-clock estimate of its expiry (for a
	// released lease: when it was written). It is written for humans and for
	// compatibility only: no decision of the protocol reads it, because
	// another machine's wall clock is not ours.
	Expires time.Time
	// Duration is the holder's lease duration; waiters use the larger of it
	// and their own.
	Duration time.Duration
	// Nonce is fresh in every write, so every write changes the ETag and a
	// writer can recognise its own write after a lost answer.
	Nonce string
	// KnownVersions is the writer's view of every node's version.
	KnownVersions VersionMappings
	// Acquirable is false for IDs removed by a scale-down.
	Acquirable bool
	// Forced marks a released lease written by an operator, not by its
	// holder: nothing proves the holder stopped writing.
	Forced bool
	// Legacy marks a lease read from an empty body: written before bodies
	// carried a nonce, or by another tool. Every empty object has the same
	// ETag, so such a state proves nothing about what happened before it;
	// a successor copies rather than hard-links after it.
	Legacy bool
}

// Held reports whether the lease names a holder.
func (l Lease) Held() bool { return l.TaskID != "" }

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

// leaseBody is the JSON body. Field names follow Camunda's lease format;
// nonce and leaseDurationMs are ours.
type leaseBody struct {
	TaskID               *string          `json:"taskId"`
	Timestamp            *int64           `json:"timestamp"`
	NodeInstance         *NodeInstance    `json:"nodeInstance"`
	KnownVersionMappings *VersionMappings `json:"knownVersionMappings,omitempty"`
	Nonce                string           `json:"nonce,omitempty"`
	LeaseDurationMs      int64            `json:"leaseDurationMs,omitempty"`
}

// releasedWriterPlaceholder stands in the body of a released lease whose
// writer is unknown (a legacy lease written back).
const releasedWriterPlaceholder = "unknown"

// Encode returns the object body and user metadata for l. Every lease, held
// or not, encodes as a JSON body; only a held one names a task in the
// metadata.
func (l Lease) Encode() ([]byte, map[string]string) {
	meta := map[string]string{
		MetaTaskID:     l.TaskID,
		MetaVersion:    strconv.FormatInt(int64(l.Instance.Version), 10),
		MetaAcquirable: strconv.FormatBool(l.Acquirable),
	}
	if l.Forced && !l.Held() {
		meta[MetaForced] = "true"
	}
	writer := l.TaskID
	if !l.Held() {
		writer = l.Writer
		if writer == "" {
			writer = releasedWriterPlaceholder
		}
	}
	ts := l.Expires.UnixMilli()
	inst := l.Instance
	known := l.KnownVersions
	if known == nil {
		known = VersionMappings{}
	}
	body, err := json.Marshal(leaseBody{
		TaskID:               &writer,
		Timestamp:            &ts,
		NodeInstance:         &inst,
		KnownVersionMappings: &known,
		Nonce:                l.Nonce,
		LeaseDurationMs:      l.Duration.Milliseconds(),
	})
	if err != nil {
		// Only maps with int keys and plain values are marshalled: this
		// cannot fail, and a lease we cannot write is a programming error.
		panic(fmt.Sprintf("nodeid: encode lease: %v", err))
	}
	switch {
	case !l.Held() && bugOn(bugNoNonce):
		return nil, meta // as before bodies had nonces: every such object has one ETag
	case !l.Held():
		pad := (releasedSizeQuantum - len(body)%releasedSizeQuantum) % releasedSizeQuantum
		body = append(body, bytes.Repeat([]byte{' '}, pad)...)
	case len(body)%releasedSizeQuantum == 0:
		body = append(body, ' ')
	}
	return body, meta
}

// DecodeLease parses the object of node id. It never panics; anything that is
// not a well-formed lease of this id, with body and metadata agreeing, is
// reported as ErrCorruptLease.
func DecodeLease(id int, body []byte, meta map[string]string) (Lease, error) {
	corrupt := func(format string, args ...any) (Lease, error) {
		return Lease{}, fmt.Errorf("%w: node %d: %s", ErrCorruptLease, id, fmt.Sprintf(format, args...))
	}
	m := make(map[string]string, len(meta))
	for k, v := range meta {
		m[strings.ToLower(k)] = v
	}
	versionText, ok := m[MetaVersion]
	if !ok {
		return corrupt("metadata %q missing", MetaVersion)
	}
	version, err := strconv.ParseInt(versionText, 10, 64)
	if err != nil || version < 0 || Version(version) > MaxVersion {
		return corrupt("metadata %s=%q is not a version", MetaVersion, versionText)
	}
	acquirable := true // missing means true, as in Camunda's format
	if a, ok := m[MetaAcquirable]; ok {
		if acquirable, err = strconv.ParseBool(a); err != nil {
			return corrupt("metadata %s=%q is not a boolean", MetaAcquirable, a)
		}
	}
	metaTask := m[MetaTaskID]
	forced := false
	if f, ok := m[MetaForced]; ok {
		if forced, err = strconv.ParseBool(f); err != nil {
			return corrupt("metadata %s=%q is not a boolean", MetaForced, f)
		}
	}

	if len(bytes.TrimSpace(body)) == 0 {
		if metaTask != "" {
			return corrupt("empty body but metadata %s=%q", MetaTaskID, metaTask)
		}
		return Lease{Instance: NodeInstance{ID: id, Version: Version(version)}, Acquirable: acquirable, Legacy: true, Forced: forced}, nil
	}
	if len(body) > MaxLeaseBodySize {
		return corrupt("body of %d bytes is too large", len(body))
	}

	var b leaseBody
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return corrupt("body: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return corrupt("body: trailing data")
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
	l := Lease{
		Instance:   *b.NodeInstance,
		Expires:    time.UnixMilli(*b.Timestamp),
		Duration:   time.Duration(b.LeaseDurationMs) * time.Millisecond,
		Nonce:      b.Nonce,
		Acquirable: acquirable,
		Forced:     forced && !held,
	}
	if held {
		l.TaskID = *b.TaskID
	} else {
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
