package nodeid

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// TenureKeyPrefix names the sub-prefix of the tenure objects:
// <prefix>nodeid-tenures/<id>/<version>/<lease ms>/<address or _>/<task id>.
// A holder creates one per tenure so that peers learn its version, address
// and lease duration from a listing alone (docs/design.md, "Learning peers
// at scale"). Nothing decides by them: they are hints.
const TenureKeyPrefix = "nodeid-tenures/"

// maxKeyLen is S3's limit on an object key.
const maxKeyLen = 1024

// TenureObject is what one tenure object's key says.
type TenureObject struct {
	ID            int
	Version       Version
	LeaseDuration time.Duration
	Address       string // "" when the holder advertised none
	TaskID        string
	LastModified  time.Time // server clock; zero when not listed
}

// TenureRepository is a Repository that also keeps tenure objects. It is
// optional: a provider on a Repository without it reads every peer's lease
// at each refresh.
type TenureRepository interface {
	Repository
	// ListTenures lists every tenure object of the cluster; keys that do not
	// parse are left out.
	ListTenures(ctx context.Context) ([]TenureObject, error)
	// CreateTenure creates the object of t with If-None-Match: * (an error
	// wrapping ErrPreconditionFailed: it exists).
	CreateTenure(ctx context.Context, t TenureObject) error
	// DeleteTenure deletes the object of t.
	DeleteTenure(ctx context.Context, t TenureObject) error
}

// TenureKey returns the key of t under prefix, and false if t cannot be
// named within S3's key length or by the rules ParseTenureKey checks.
func TenureKey(prefix string, t TenureObject) (string, bool) {
	addr := t.Address
	if addr == "" {
		addr = "_"
	} else if ValidateAddress(addr) != nil || strings.Contains(addr, "/") {
		return "", false
	}
	if t.ID < 0 || t.Version < 1 || t.Version > MaxVersion || t.LeaseDuration <= 0 || !safeTaskIDText(t.TaskID) {
		return "", false
	}
	key := prefix + TenureKeyPrefix + strconv.Itoa(t.ID) + "/" + strconv.FormatInt(int64(t.Version), 10) + "/" +
		strconv.FormatInt(t.LeaseDuration.Milliseconds(), 10) + "/" + addr + "/" + t.TaskID
	if len(key) > maxKeyLen {
		return "", false
	}
	return key, true
}

// ParseTenureKey parses a key TenureKey made.
func ParseTenureKey(prefix, key string) (TenureObject, bool) {
	rest, ok := strings.CutPrefix(key, prefix+TenureKeyPrefix)
	if !ok {
		return TenureObject{}, false
	}
	parts := strings.SplitN(rest, "/", 5)
	if len(parts) != 5 {
		return TenureObject{}, false
	}
	id, err := strconv.Atoi(parts[0])
	if err != nil || id < 0 || strconv.Itoa(id) != parts[0] {
		return TenureObject{}, false
	}
	v, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || v < 1 || Version(v) > MaxVersion || strconv.FormatInt(v, 10) != parts[1] {
		return TenureObject{}, false
	}
	ms, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || ms <= 0 || ms > int64(24*time.Hour/time.Millisecond) {
		return TenureObject{}, false
	}
	t := TenureObject{ID: id, Version: Version(v), LeaseDuration: time.Duration(ms) * time.Millisecond, TaskID: parts[4]}
	if parts[3] != "_" {
		if ValidateAddress(parts[3]) != nil {
			return TenureObject{}, false
		}
		t.Address = parts[3]
	}
	if !safeTaskIDText(t.TaskID) {
		return TenureObject{}, false
	}
	return t, true
}

// lease returns the held lease t describes, for the peer cache: no body was
// read, so it knows no versions of others.
func (t TenureObject) lease() Lease {
	return Lease{
		Instance:   NodeInstance{ID: t.ID, Version: t.Version},
		TaskID:     t.TaskID,
		Address:    t.Address,
		Duration:   t.LeaseDuration,
		Acquirable: true,
	}
}
