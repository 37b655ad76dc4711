package nodeid

import (
	"errors"
	"fmt"
)

// Errors of the storage layer. Repository implementations wrap them in a
// *StorageError, so callers test with errors.Is.
var (
	// ErrPreconditionFailed is HTTP 412: the object changed since the ETag we
	// hold (If-Match) or already exists (If-None-Match: *).
	ErrPreconditionFailed = errors.New("precondition failed")
	// ErrNotFound is HTTP 404: the object does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict is HTTP 409 ConditionalRequestConflict: two conditional
	// writes raced inside S3. Nothing landed; re-read and retry.
	ErrConflict = errors.New("conditional request conflict")
	// ErrSlowDown is HTTP 503 SlowDown (or 429): back off and retry.
	ErrSlowDown = errors.New("slow down")
	// ErrUnavailable is any other failure to get an answer: timeout,
	// connection error, 5xx. A write that failed this way may have landed.
	ErrUnavailable = errors.New("storage unavailable")
	// ErrAccessDenied is HTTP 403 or bad credentials; retrying will not help.
	ErrAccessDenied = errors.New("access denied")
	// ErrWrongEndpoint is an answer that says the request went to the wrong
	// place: signed for another region (400 AuthorizationHeaderMalformed),
	// a bucket at another endpoint (301 PermanentRedirect), or a server on
	// the other scheme (a plain HTTP answer to https://, a 400 that is no S3
	// error to http://). Retrying will not help.
	ErrWrongEndpoint = errors.New("wrong endpoint or region")
)

// Errors of the lease protocol.
var (
	// ErrCorruptLease marks a lease object that cannot be parsed, or whose
	// body and metadata disagree. It is reported and skipped, never taken.
	ErrCorruptLease = errors.New("corrupt lease object")
	// ErrConditionalWritesNotEnforced means the endpoint accepted a write
	// whose precondition was false. Leases on it would give two owners.
	ErrConditionalWritesNotEnforced = errors.New("endpoint does not enforce conditional writes")
	// ErrLeaseLost is reported when the holder can no longer prove that it
	// holds its lease: overwritten, deleted, marked unusable, or not renewed
	// before its self-fence deadline.
	ErrLeaseLost = errors.New("lease lost")
	// ErrHandoffOtherBoot is returned by Adopt for a hand-off that records
	// no boot ID or another one than this host's: its deadlines are
	// readings of another CLOCK_BOOTTIME (another host, or before a
	// reboot) and mean nothing here. It comes with ErrInvalidConfig.
	ErrHandoffOtherBoot = errors.New("hand-off from another boot")
	// ErrChanged is returned by ForceReleaseIfUnchanged and ScaleIfUnchanged
	// when a lease object is no longer the one the caller checked (another
	// ETag, or created since it was seen missing): nothing was written over
	// it. Check again and retry.
	ErrChanged = errors.New("lease object changed since it was checked")
	// ErrAcquireTimeout means no node ID could be acquired in time.
	ErrAcquireTimeout = errors.New("no node id acquired before the acquire timeout")
	// ErrInvalidConfig wraps every configuration error.
	ErrInvalidConfig = errors.New("invalid configuration")
	// ErrClosed is returned by a provider that was closed.
	ErrClosed = errors.New("provider closed")
)

// isLostRace reports a conditional write that lost to another write: 412
// (the object changed since our ETag, or exists) or 409 (two conditional
// writes raced inside S3). Someone else wrote first.
func isLostRace(err error) bool {
	return errors.Is(err, ErrPreconditionFailed) || errors.Is(err, ErrConflict)
}

// IsPermanent reports errors that retrying will not cure: access denied, a
// wrong endpoint or region, an invalid configuration, no such bucket.
func IsPermanent(err error) bool {
	return errors.Is(err, ErrAccessDenied) || errors.Is(err, ErrWrongEndpoint) || errors.Is(err, ErrInvalidConfig) ||
		(errors.Is(err, ErrNotFound) && IsNoSuchBucket(err))
}

// StorageError describes a failed storage request. Its Kind is one of the
// storage sentinels above and is what errors.Is matches.
type StorageError struct {
	Op     string // "get", "list", "create", "write"
	Key    string
	Status int    // HTTP status, 0 when no answer arrived
	Code   string // the server's error code, e.g. "PreconditionFailed"
	Kind   error  // ErrPreconditionFailed, ErrNotFound, ...
	Err    error  // the underlying error
	// Detail, when set, is what Error shows instead of Err: the server's
	// own message, without the SDK's request IDs (they stay in Err).
	Detail string
}

func (e *StorageError) Error() string {
	msg := fmt.Sprintf("%s %s: %v", e.Op, e.Key, e.Kind)
	if e.Status != 0 {
		msg += fmt.Sprintf(" (HTTP %d %s)", e.Status, e.Code)
	}
	switch {
	case e.Detail != "":
		msg += ": " + e.Detail
	case e.Status != 0 && e.Code != "":
		// The status and code say it all; the SDK's text would only add
		// request IDs.
	case e.Err != nil && e.Err != e.Kind:
		msg += ": " + causeText(e.Err)
	}
	return msg
}

// Is reports whether target is the kind of this error.
func (e *StorageError) Is(target error) bool { return target == e.Kind }

func (e *StorageError) Unwrap() error { return e.Err }

// LostError tells why a lease was lost.
type LostError struct {
	Instance NodeInstance
	Reason   string // "overwritten", "deleted", "unusable", "self-fence deadline", ...
	Err      error  // the storage error that revealed it, if any
}

func (e *LostError) Error() string {
	msg := fmt.Sprintf("lease lost for %s: %s", e.Instance, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is makes errors.Is(err, ErrLeaseLost) true.
func (e *LostError) Is(target error) bool { return target == ErrLeaseLost }

func (e *LostError) Unwrap() error { return e.Err }
