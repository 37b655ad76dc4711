package camunda

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// InitializedMarkerKey is written (unconditionally, empty) once Bootstrap
// has created every lease object; its presence makes later bootstraps
// do nothing.
const InitializedMarkerKey = "node-ids-initialized"

// DefaultRequestTimeout bounds every S3 request of this package unless a
// Broker says otherwise: a hung request must not hang a test.
const DefaultRequestTimeout = 10 * time.Second

// Key is the object key of node ID id: "<id>.json" at the bucket root.
func Key(id int) string { return strconv.Itoa(id) + ".json" }

// ErrNoLease is returned by Acquire when every node ID is validly held (by
// the broker's clock), not acquirable, or was taken concurrently.
var ErrNoLease = errors.New("camunda: no node ID could be acquired")

// ErrLost is reported when a renewal fails: Camunda shuts the broker down.
var ErrLost = errors.New("camunda: lease lost")

func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		d = DefaultRequestTimeout
	}
	return context.WithTimeout(ctx, d)
}

// isStatus reports whether err is an S3 answer with HTTP status code.
func isStatus(err error, code int) bool {
	var re *smithyhttp.ResponseError
	return errors.As(err, &re) && re.HTTPStatusCode() == code
}

// Bootstrap does what Camunda does on first start: unless the marker
// exists, it creates 0.json .. (n-1).json with If-None-Match: *, an empty
// body and no metadata (412 means another broker created it first, which
// is fine), then writes the marker.
func Bootstrap(ctx context.Context, client *s3.Client, bucket string, n int) error {
	if n <= 0 {
		return fmt.Errorf("camunda: bootstrap of %d node IDs", n)
	}
	rctx, cancel := withTimeout(ctx, 0)
	out, err := client.GetObject(rctx, &s3.GetObjectInput{Bucket: &bucket, Key: aws.String(InitializedMarkerKey)})
	if err == nil {
		out.Body.Close()
		cancel()
		return nil
	}
	cancel()
	var nsk *types.NoSuchKey
	if !errors.As(err, &nsk) && !isStatus(err, http.StatusNotFound) {
		return fmt.Errorf("camunda: bootstrap: check %s: %w", InitializedMarkerKey, err)
	}
	for id := range n {
		rctx, cancel := withTimeout(ctx, 0)
		_, err := client.PutObject(rctx, &s3.PutObjectInput{
			Bucket: &bucket, Key: aws.String(Key(id)), Body: bytes.NewReader(nil),
			ContentType: aws.String("application/json"), IfNoneMatch: aws.String("*"),
		})
		cancel()
		if err != nil && !isStatus(err, http.StatusPreconditionFailed) {
			return fmt.Errorf("camunda: bootstrap: create %s: %w", Key(id), err)
		}
	}
	rctx, cancel = withTimeout(ctx, 0)
	defer cancel()
	if _, err := client.PutObject(rctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String(InitializedMarkerKey), Body: bytes.NewReader(nil)}); err != nil {
		return fmt.Errorf("camunda: bootstrap: write %s: %w", InitializedMarkerKey, err)
	}
	return nil
}

// LeaseBody is the JSON body of a held lease exactly as Camunda writes it:
// fields in record order, Version as a bare number, the known mappings
// sorted by numeric node ID (a Java SortedMap<Integer, …>).
func LeaseBody(taskID string, expiry int64, id int, version int64, known map[int32]int64) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"taskId":%s,"timestamp":%d,"nodeInstance":{"id":%d,"version":%d},"knownVersionMappings":{"mappingsByNodeId":{`,
		jsonString(taskID), expiry, id, version)
	for i, k := range slices.Sorted(maps.Keys(known)) {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"%d":%d`, k, known[k])
	}
	b.WriteString("}}}")
	return b.Bytes()
}

func heldMeta(taskID string, version int64) map[string]string {
	return map[string]string{MetaTaskID: taskID, MetaVersion: strconv.FormatInt(version, 10), MetaAcquirable: "true"}
}

func releasedMeta(version int64, acquirable bool) map[string]string {
	return map[string]string{MetaTaskID: "", MetaVersion: strconv.FormatInt(version, 10), MetaAcquirable: strconv.FormatBool(acquirable)}
}

// put writes a lease object, conditionally on ifMatch when it is not empty,
// and returns the new ETag.
func put(ctx context.Context, client *s3.Client, bucket string, id int, body []byte, meta map[string]string, ifMatch string, timeout time.Duration) (string, error) {
	in := &s3.PutObjectInput{
		Bucket: &bucket, Key: aws.String(Key(id)), Body: bytes.NewReader(body),
		ContentType: aws.String("application/json"), Metadata: meta,
	}
	if ifMatch != "" {
		in.IfMatch = aws.String(ifMatch)
	}
	rctx, cancel := withTimeout(ctx, timeout)
	defer cancel()
	out, err := client.PutObject(rctx, in)
	if err != nil {
		return "", fmt.Errorf("camunda: put %s: %w", Key(id), err)
	}
	return aws.ToString(out.ETag), nil
}

// WriteHeld lays down, unconditionally, the object of a lease held by
// taskID at version until expiry, as Camunda writes it.
func WriteHeld(ctx context.Context, client *s3.Client, bucket string, id int, taskID string, version int64, expiry time.Time, known map[int32]int64) (etag string, err error) {
	return put(ctx, client, bucket, id, LeaseBody(taskID, expiry.UnixMilli(), id, version, known), heldMeta(taskID, version), "", 0)
}

// WriteReleased lays down, unconditionally, a released lease object (as
// Camunda's graceful release writes it) at version; acquirable false is a
// node ID removed by a scale-down.
func WriteReleased(ctx context.Context, client *s3.Client, bucket string, id int, version int64, acquirable bool) (etag string, err error) {
	return put(ctx, client, bucket, id, nil, releasedMeta(version, acquirable), "", 0)
}

// Get reads lease object id by Camunda's rules and returns it with its
// ETag. An unreadable object is an error wrapping ErrUnreadable.
func Get(ctx context.Context, client *s3.Client, bucket string, id int, timeout time.Duration) (Stored, string, error) {
	rctx, cancel := withTimeout(ctx, timeout)
	defer cancel()
	out, err := client.GetObject(rctx, &s3.GetObjectInput{Bucket: &bucket, Key: aws.String(Key(id))})
	if err != nil {
		return Stored{}, "", fmt.Errorf("camunda: get %s: %w", Key(id), err)
	}
	defer out.Body.Close()
	body, err := io.ReadAll(out.Body)
	if err != nil {
		return Stored{}, "", fmt.Errorf("camunda: get %s: %w", Key(id), err)
	}
	s, err := ReadLease(body, out.Metadata)
	if err != nil {
		return Stored{}, "", fmt.Errorf("camunda: %s: %w", Key(id), err)
	}
	return s, aws.ToString(out.ETag), nil
}

// Broker is one Camunda broker's node-ID provider: it acquires a lease,
// renews it every LeaseDuration/3 and releases it on shutdown, following
// Camunda 8.9's rules, with its own wall clock so tests can give it skew.
// Set the exported fields before the first call.
type Broker struct {
	Client *s3.Client
	Bucket string
	TaskID string
	// N is the number of node IDs (the cluster size).
	N             int
	LeaseDuration time.Duration
	// Now is the broker's wall clock; time.Now when nil. Camunda decides
	// validity and expiry by its local clock only.
	Now func() time.Time
	// RequestTimeout bounds each S3 request; DefaultRequestTimeout if 0.
	RequestTimeout time.Duration

	mu      sync.Mutex
	held    bool
	id      int
	version int64
	expiry  int64
	etag    string
	// known is what renewals write as knownVersionMappings: Camunda fills
	// it from cluster membership, which starts empty, so only the first
	// write (the acquire) carries {id: version}.
	known map[int32]int64
}

func (b *Broker) now() time.Time {
	if b.Now != nil {
		return b.Now()
	}
	return time.Now()
}

// SetKnown sets the version mappings later renewals write, as Camunda does
// when cluster membership changes.
func (b *Broker) SetKnown(known map[int32]int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.known = maps.Clone(known)
}

// Held returns the held node ID, version and ETag; ok is false when no
// lease is held.
func (b *Broker) Held() (id int, version int64, etag string, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.id, b.version, b.etag, b.held
}

// Acquire makes one pass over the node IDs in order, as one round of
// Camunda's acquire loop (Camunda repeats rounds with a backoff; callers
// retry on ErrNoLease). For each it reads the object; if the lease is not
// valid by the broker's clock and the ID is acquirable, it writes version+1
// with If-Match the ETag it read and an expiry of now+LeaseDuration. A
// failed write moves on to the next ID, but a failed or unreadable read
// fails Acquire, as in Camunda, where it fails the broker's start.
func (b *Broker) Acquire(ctx context.Context) (id int, version int64, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held {
		return 0, 0, fmt.Errorf("camunda: %s already holds node ID %d", b.TaskID, b.id)
	}
	for id := range b.N {
		s, etag, err := Get(ctx, b.Client, b.Bucket, id, b.RequestTimeout)
		if err != nil {
			return 0, 0, fmt.Errorf("camunda: acquire: %w", err)
		}
		now := b.now().UnixMilli()
		if s.ValidAt(now) || !s.Acquirable {
			continue
		}
		v := s.Version + 1
		expiry := now + b.LeaseDuration.Milliseconds()
		known := map[int32]int64{int32(id): v}
		newTag, err := put(ctx, b.Client, b.Bucket, id, LeaseBody(b.TaskID, expiry, id, v, known), heldMeta(b.TaskID, v), etag, b.RequestTimeout)
		if err != nil {
			continue
		}
		b.held, b.id, b.version, b.expiry, b.etag = true, id, v, expiry, newTag
		return id, v, nil
	}
	return 0, 0, ErrNoLease
}

// Renew extends the lease to now+LeaseDuration with If-Match the last
// ETag. Any failure (the lease already expired by the broker's clock, a
// 412 because someone else wrote the object, a timeout, a 5xx) loses the
// lease: the error wraps ErrLost and the broker holds nothing afterwards.
func (b *Broker) Renew(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.held {
		return fmt.Errorf("%w: no lease held", ErrLost)
	}
	now := b.now().UnixMilli()
	if now > b.expiry {
		b.held = false
		return fmt.Errorf("%w: node ID %d expired at %d, now %d", ErrLost, b.id, b.expiry, now)
	}
	expiry := now + b.LeaseDuration.Milliseconds()
	etag, err := put(ctx, b.Client, b.Bucket, b.id, LeaseBody(b.TaskID, expiry, b.id, b.version, b.known), heldMeta(b.TaskID, b.version), b.etag, b.RequestTimeout)
	if err != nil {
		b.held = false
		return fmt.Errorf("%w: renew node ID %d: %w", ErrLost, b.id, err)
	}
	b.expiry, b.etag = expiry, etag
	return nil
}

// Run renews every LeaseDuration/3 (Camunda's fixed rate, by elapsed time,
// not by the possibly skewed wall clock) until ctx is done, returning nil,
// or a renewal fails: then it sends the error on lost, if not nil, and
// returns it. A renewal under way when ctx ends is finished (each request
// has its own timeout), so the broker still holds the lease afterwards and
// Release can give it back, as Camunda's shutdown does.
func (b *Broker) Run(ctx context.Context, lost chan<- error) error {
	t := time.NewTicker(b.LeaseDuration / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := b.Renew(context.WithoutCancel(ctx)); err != nil {
			if lost != nil {
				lost <- err
			}
			return err
		}
	}
}

// Release gives the lease back as Camunda's graceful shutdown does, if it
// is still valid by the broker's clock: an empty body with If-Match, taskid
// "", the version kept, acquirable true. Camunda only logs a failure; it
// is returned here so tests can see it.
func (b *Broker) Release(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.held {
		return nil
	}
	b.held = false
	if b.now().UnixMilli() > b.expiry {
		return nil
	}
	if _, err := put(ctx, b.Client, b.Bucket, b.id, nil, releasedMeta(b.version, true), b.etag, b.RequestTimeout); err != nil {
		return fmt.Errorf("camunda: release node ID %d: %w", b.id, err)
	}
	return nil
}
