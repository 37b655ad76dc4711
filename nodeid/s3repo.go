package nodeid

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// DefaultRequestTimeout bounds one S3 request when the caller's context has
// no earlier deadline.
const DefaultRequestTimeout = 5 * time.Second

// ProbeKeyPrefix names the objects the start-up probe writes beside the
// leases: <prefix>nodeid-probe-<0..15>.json. They are not lease keys (not a
// decimal ID), so List ignores them. Each probe picks one of 16 at random,
// so tasks starting together rarely contend for one.
const ProbeKeyPrefix = "nodeid-probe-"

const probeKeys = 16

// S3Config selects an S3 endpoint and credentials. Empty fields fall back to
// the standard AWS chain: AWS_REGION, AWS_ENDPOINT_URL_S3 (or
// AWS_ENDPOINT_URL), environment credentials, shared config, the ECS task
// role.
type S3Config struct {
	Region    string // default from the chain, else us-east-1
	Endpoint  string // e.g. http://127.0.0.1:7070; overrides AWS_ENDPOINT_URL_S3
	PathStyle bool   // bucket in the path, as most S3-compatible servers need
	// AccessKey and SecretKey set static credentials (tests, demos).
	AccessKey, SecretKey string
	// Logger receives the SDK's own log lines (e.g. the EC2 metadata
	// client's "falling back to IMDSv1" warning) as slog records, with
	// component=aws-sdk; nil leaves the SDK's default (plain lines on stderr).
	Logger *slog.Logger
}

// sdkLogger adapts slog to the SDK's logging.Logger.
type sdkLogger struct{ log *slog.Logger }

func (l sdkLogger) Logf(c logging.Classification, format string, v ...any) {
	level := slog.LevelInfo
	switch c {
	case logging.Warn:
		level = slog.LevelWarn
	case logging.Debug:
		level = slog.LevelDebug
	}
	msg := fmt.Sprintf(format, v...)
	if strings.HasPrefix(msg, "failed to discard remaining HTTP response body") {
		// Connection reuse after an error answer the server closed early
		// (an access-denied probe): the SDK's housekeeping, not news to
		// an operator, and a second line beside the one error line.
		level = slog.LevelDebug
	}
	l.log.Log(context.Background(), level, msg, "component", "aws-sdk")
}

// NewS3Client builds an S3 client for leases: the SDK retries reads a few
// times without a client-side retry quota (which would turn a storm of
// errors into refused requests), checksums are only sent when S3 requires
// them (several S3-compatible servers reject the streaming form), and
// connections are dialled with a short timeout.
func NewS3Client(ctx context.Context, c S3Config) (*s3.Client, error) {
	opts := []func(*config.LoadOptions) error{
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = 3
				o.MaxBackoff = time.Second
				o.RateLimiter = ratelimit.None
			})
		}),
		config.WithHTTPClient(awshttp.NewBuildableClient().
			WithDialerOptions(func(d *net.Dialer) { d.Timeout = 3 * time.Second }).
			WithTransportOptions(func(t *http.Transport) {
				t.IdleConnTimeout = 30 * time.Second
				t.ResponseHeaderTimeout = 30 * time.Second
			})),
	}
	if c.Logger != nil {
		opts = append(opts, config.WithLogger(sdkLogger{c.Logger}))
	}
	if c.Region != "" {
		opts = append(opts, config.WithRegion(c.Region))
	}
	if c.AccessKey != "" || c.SecretKey != "" {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(c.AccessKey, c.SecretKey, "")))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
		o.UsePathStyle = c.PathStyle
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	}), nil
}

// S3Repository keeps lease objects <prefix><id>.json in one bucket.
type S3Repository struct {
	client    *s3.Client
	bucket    string
	prefix    string
	timeout   time.Duration
	requests  atomic.Int64
	throttled atomic.Int64 // answers 503 (SlowDown) or 429
	throttle  throttleLog
}

// throttleQuiet: throttling has ended once this long passed without a
// throttled answer.
const throttleQuiet = 10 * time.Second

// throttleLog logs one line when S3 starts throttling and one when it
// stopped, not one per request.
type throttleLog struct {
	mu      sync.Mutex
	log     *slog.Logger
	on      bool
	last    time.Time
	episode int64
}

func (t *throttleLog) observe(throttled bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	switch {
	case throttled && !t.on:
		t.on, t.last, t.episode = true, now, 1
		if t.log != nil {
			t.log.Warn("S3 is throttling requests (503 SlowDown): reads and listings back off with jitter; renewals retry until their deadline")
		}
	case throttled:
		t.last = now
		t.episode++
	case t.on && now.Sub(t.last) >= throttleQuiet:
		t.on = false
		if t.log != nil {
			t.log.Info("S3 throttling ended", "throttled_requests", t.episode)
		}
	}
}

// SetLogger makes the repository log when S3 starts and stops throttling
// its requests (one line each).
func (r *S3Repository) SetLogger(l *slog.Logger) {
	r.throttle.mu.Lock()
	r.throttle.log = l
	r.throttle.mu.Unlock()
}

// Throttled returns how many answers were 503 (S3's SlowDown) or 429,
// retries included.
func (r *S3Repository) Throttled() int64 { return r.throttled.Load() }

var (
	_ TenureRepository      = (*S3Repository)(nil)
	_ ReleaseHintRepository = (*S3Repository)(nil)
)

// NewS3Repository returns a repository on bucket. The prefix (may be empty)
// lets several clusters share a bucket; requestTimeout bounds every request
// (DefaultRequestTimeout when zero).
func NewS3Repository(client *s3.Client, bucket, prefix string, requestTimeout time.Duration) (*S3Repository, error) {
	if err := ValidateBucket(bucket); err != nil {
		return nil, err
	}
	if err := ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	if requestTimeout <= 0 {
		requestTimeout = DefaultRequestTimeout
	}
	return &S3Repository{client: client, bucket: bucket, prefix: prefix, timeout: requestTimeout}, nil
}

// Requests returns how many HTTP requests this repository has sent,
// retries included.
func (r *S3Repository) Requests() int64 { return r.requests.Load() }

// Key returns the object key of node id.
func (r *S3Repository) Key(id int) string { return LeaseKey(r.prefix, id) }

// List implements Repository.
func (r *S3Repository) List(ctx context.Context) (Listing, error) {
	var (
		listing Listing
		token   *string
	)
	for page := 0; ; page++ {
		cctx, cancel := context.WithTimeout(ctx, r.timeout)
		// The tenure objects come in the same pages: below about 480
		// nodes one page holds leases and tenures both.
		out, err := r.client.ListObjectsV2(cctx, &s3.ListObjectsV2Input{
			Bucket:            &r.bucket,
			Prefix:            &r.prefix,
			ContinuationToken: token,
		}, r.count)
		cancel()
		if err != nil {
			return Listing{}, classify("list", r.prefix+"*", err)
		}
		if page == 0 {
			listing.ServerDate = serverDate(out.ResultMetadata)
		}
		for _, o := range out.Contents {
			if aws.ToString(o.Key) == MarkerKey(r.prefix) {
				listing.MarkerSeen = true
				continue
			}
			if t, ok := ParseTenureKey(r.prefix, aws.ToString(o.Key)); ok {
				t.LastModified = aws.ToTime(o.LastModified)
				listing.Tenures = append(listing.Tenures, t)
				continue
			}
			id, ok := ParseLeaseKey(r.prefix, aws.ToString(o.Key))
			if !ok {
				continue
			}
			listing.Slots = append(listing.Slots, Slot{
				ID:           id,
				ETag:         normalizeETag(aws.ToString(o.ETag)),
				LastModified: aws.ToTime(o.LastModified),
				Size:         aws.ToInt64(o.Size),
			})
		}
		if !aws.ToBool(out.IsTruncated) || out.NextContinuationToken == nil {
			break
		}
		token = out.NextContinuationToken
	}
	sort.Slice(listing.Slots, func(i, j int) bool { return listing.Slots[i].ID < listing.Slots[j].ID })
	listing.TenuresListed = true
	return listing, nil
}

// ListTenures implements TenureRepository.
func (r *S3Repository) ListTenures(ctx context.Context) ([]TenureObject, error) {
	prefix := r.prefix + TenureKeyPrefix
	var (
		out   []TenureObject
		token *string
	)
	for {
		cctx, cancel := context.WithTimeout(ctx, r.timeout)
		page, err := r.client.ListObjectsV2(cctx, &s3.ListObjectsV2Input{
			Bucket:            &r.bucket,
			Prefix:            &prefix,
			ContinuationToken: token,
		}, r.count)
		cancel()
		if err != nil {
			return nil, classify("list", prefix+"*", err)
		}
		for _, o := range page.Contents {
			t, ok := ParseTenureKey(r.prefix, aws.ToString(o.Key))
			if !ok {
				continue
			}
			t.LastModified = aws.ToTime(o.LastModified)
			out = append(out, t)
		}
		if !aws.ToBool(page.IsTruncated) || page.NextContinuationToken == nil {
			return out, nil
		}
		token = page.NextContinuationToken
	}
}

// CreateTenure implements TenureRepository.
func (r *S3Repository) CreateTenure(ctx context.Context, t TenureObject) error {
	key, ok := TenureKey(r.prefix, t)
	if !ok {
		return &StorageError{Op: "create tenure", Key: r.prefix + TenureKeyPrefix, Kind: ErrUnavailable, Err: errors.New("tenure cannot be named by a key")}
	}
	body := fmt.Sprintf(`{"id":%d,"version":%d,"taskId":%q,"address":%q,"leaseDurationMs":%d}`,
		t.ID, t.Version, t.TaskID, t.Address, t.LeaseDuration.Milliseconds())
	_, err := r.put(ctx, "create tenure", key, []byte(body), nil, "", true)
	return err
}

// DeleteTenure implements TenureRepository.
func (r *S3Repository) DeleteTenure(ctx context.Context, t TenureObject) error {
	key, ok := TenureKey(r.prefix, t)
	if !ok {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	if _, err := r.client.DeleteObject(cctx, &s3.DeleteObjectInput{Bucket: &r.bucket, Key: &key}, r.count); err != nil {
		return classify("delete tenure", key, err)
	}
	return nil
}

// ReleaseHint implements ReleaseHintRepository: one HEAD.
func (r *S3Repository) ReleaseHint(ctx context.Context) (string, error) {
	key := r.prefix + ReleaseHintKey
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	out, err := r.client.HeadObject(cctx, &s3.HeadObjectInput{Bucket: &r.bucket, Key: &key}, r.count)
	if err != nil {
		return "", classify("head", key, err)
	}
	return normalizeETag(aws.ToString(out.ETag)), nil
}

// SignalRelease implements ReleaseHintRepository: a HEAD and one
// conditional PUT (the policy allows no other) with a fresh body.
func (r *S3Repository) SignalRelease(ctx context.Context) error {
	key := r.prefix + ReleaseHintKey
	etag, err := r.ReleaseHint(ctx)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	body := []byte(fmt.Sprintf(`{"released":%q}`, newNonce()))
	_, err = r.put(ctx, "release hint", key, body, nil, etag, etag == "")
	if err == nil || isLostRace(err) || errors.Is(err, ErrNotFound) {
		return nil // changed, by us or by another releaser
	}
	return err
}

// Get implements Repository.
func (r *S3Repository) Get(ctx context.Context, id int) (Record, error) {
	key := r.Key(id)
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	out, err := r.client.GetObject(cctx, &s3.GetObjectInput{Bucket: &r.bucket, Key: &key}, r.count)
	if err != nil {
		return Record{}, classify("get", key, err)
	}
	defer out.Body.Close()
	body, err := io.ReadAll(io.LimitReader(out.Body, MaxLeaseBodySize+1))
	if err != nil {
		return Record{}, &StorageError{Op: "get", Key: key, Kind: ErrUnavailable, Err: err}
	}
	rec := Record{
		Slot: Slot{
			ID:           id,
			ETag:         normalizeETag(aws.ToString(out.ETag)),
			LastModified: aws.ToTime(out.LastModified),
			Size:         int64(len(body)),
		},
		ServerDate: serverDate(out.ResultMetadata),
	}
	rec.Lease, err = DecodeLease(id, body, out.Metadata)
	if err != nil {
		return rec, fmt.Errorf("get %s: %w", key, err)
	}
	return rec, nil
}

// Marker implements Repository.
func (r *S3Repository) Marker(ctx context.Context) (ClusterMarker, error) {
	key := MarkerKey(r.prefix)
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	out, err := r.client.GetObject(cctx, &s3.GetObjectInput{Bucket: &r.bucket, Key: &key}, r.count)
	if err != nil {
		return ClusterMarker{}, classify("get", key, err)
	}
	defer out.Body.Close()
	body, err := io.ReadAll(io.LimitReader(out.Body, MaxLeaseBodySize+1))
	if err != nil {
		return ClusterMarker{}, &StorageError{Op: "get", Key: key, Kind: ErrUnavailable, Err: err}
	}
	m, err := DecodeMarker(body)
	if err != nil {
		return ClusterMarker{}, fmt.Errorf("get %s: %w", key, err)
	}
	m.LastModified = aws.ToTime(out.LastModified)
	return m, nil
}

// MarkerAt reports whether the cluster marker exists under another prefix
// of the same bucket, e.g. "" for Camunda's leases at the bucket root. One
// LIST of at most one key: the least-privilege policy grants s3:ListBucket
// on the whole bucket but GetObject only under the configured prefix.
func (r *S3Repository) MarkerAt(ctx context.Context, prefix string) (bool, error) {
	key := MarkerKey(prefix)
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	out, err := r.client.ListObjectsV2(cctx, &s3.ListObjectsV2Input{Bucket: &r.bucket, Prefix: &key, MaxKeys: aws.Int32(1)}, r.count)
	if err != nil {
		return false, classify("list", key, err)
	}
	// The exact key sorts first among the keys it prefixes.
	return len(out.Contents) > 0 && aws.ToString(out.Contents[0].Key) == key, nil
}

// CreateMarker implements Repository.
func (r *S3Repository) CreateMarker(ctx context.Context, m ClusterMarker) error {
	_, err := r.put(ctx, "create", MarkerKey(r.prefix), m.Encode(), nil, "", true)
	return err
}

// Create implements Repository.
func (r *S3Repository) Create(ctx context.Context, l Lease) (string, error) {
	body, meta := l.Encode()
	return r.put(ctx, "create", r.Key(l.Instance.ID), body, meta, "", true)
}

// Write implements Repository.
func (r *S3Repository) Write(ctx context.Context, l Lease, etag string) (string, error) {
	if etag == "" {
		return "", &StorageError{Op: "write", Key: r.Key(l.Instance.ID), Kind: ErrPreconditionFailed, Err: errors.New("no ETag to match")}
	}
	body, meta := l.Encode()
	return r.put(ctx, "write", r.Key(l.Instance.ID), body, meta, etag, false)
}

// put is one conditional PutObject. The SDK must not retry it: if a first
// attempt landed and its answer was lost, the retry would get 412 against
// our own write and report a loss. The protocol retries itself and
// recognises its own writes by their nonce.
func (r *S3Repository) put(ctx context.Context, op, key string, body []byte, meta map[string]string, ifMatch string, ifNoneMatch bool) (string, error) {
	in := &s3.PutObjectInput{
		Bucket:        &r.bucket,
		Key:           &key,
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
		ContentType:   aws.String("application/json"),
		Metadata:      meta,
	}
	if ifNoneMatch {
		in.IfNoneMatch = aws.String("*")
	} else {
		in.IfMatch = aws.String(ifMatch)
	}
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	out, err := r.client.PutObject(cctx, in, r.count, func(o *s3.Options) { o.Retryer = aws.NopRetryer{} })
	if err != nil {
		return "", classify(op, key, err)
	}
	etag := normalizeETag(aws.ToString(out.ETag))
	if etag == "" {
		return "", &StorageError{Op: op, Key: key, Kind: ErrUnavailable, Err: errors.New("answer without ETag")}
	}
	return etag, nil
}

// Probe checks that the endpoint enforces conditional writes, on the key
// <prefix>nodeid-probe.json: a second If-None-Match: * create and an If-Match
// with a wrong ETag must both be refused, and an If-Match with the right ETag
// must succeed. Several S3-compatible stores ignore the headers and answer
// 200, which would give a lease two owners; on such a store Probe returns
// ErrConditionalWritesNotEnforced. Probe objects are left in place (deleting
// them would need a permission the leases do not).
func (r *S3Repository) Probe(ctx context.Context) error {
	key := fmt.Sprintf("%s%s%d.json", r.prefix, ProbeKeyPrefix, mathrand.IntN(probeKeys))
	body := func() []byte { return []byte(fmt.Sprintf(`{"probe":%q}`, newNonce())) }
	meta := map[string]string{"purpose": "nodeid conditional-write probe"}

	// Make sure the object exists; a concurrent prober may create it first.
	etag, err := r.put(ctx, "probe create", key, body(), meta, "", true)
	if err != nil && !isLostRace(err) {
		return fmt.Errorf("probe: %w", err)
	}
	// A second create must be refused.
	if _, err := r.put(ctx, "probe create", key, body(), meta, "", true); err == nil {
		return fmt.Errorf("%w: a second PutObject with If-None-Match: * on %s succeeded", ErrConditionalWritesNotEnforced, key)
	} else if !isLostRace(err) {
		return fmt.Errorf("probe: %w", err)
	}
	// A wrong ETag must be refused.
	wrong := `"00000000000000000000000000000000"`
	if _, err := r.put(ctx, "probe write", key, body(), meta, wrong, false); err == nil {
		return fmt.Errorf("%w: PutObject with If-Match of a wrong ETag on %s succeeded", ErrConditionalWritesNotEnforced, key)
	} else if !isLostRace(err) {
		return fmt.Errorf("probe: %w", err)
	}
	// The right ETag must be accepted. Another prober may write in between;
	// read again and retry after a random pause.
	for attempt := 0; attempt < 10; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("probe: %w", ctx.Err())
			case <-time.After(time.Duration(mathrand.Int64N(int64(100*time.Millisecond) << min(attempt, 4)))):
			}
		}
		if etag == "" || attempt > 0 {
			cctx, cancel := context.WithTimeout(ctx, r.timeout)
			head, herr := r.client.HeadObject(cctx, &s3.HeadObjectInput{Bucket: &r.bucket, Key: &key}, r.count)
			cancel()
			if herr != nil {
				return fmt.Errorf("probe: %w", classify("probe head", key, herr))
			}
			etag = normalizeETag(aws.ToString(head.ETag))
		}
		_, err := r.put(ctx, "probe write", key, body(), meta, etag, false)
		if err == nil {
			return nil
		}
		if !isLostRace(err) {
			return fmt.Errorf("probe: %w", err)
		}
	}
	return fmt.Errorf("probe: PutObject with If-Match of the current ETag of %s was refused 10 times", key)
}

// count is a per-operation option that counts every HTTP request sent.
func (r *S3Repository) count(o *s3.Options) {
	o.HTTPClient = countingClient{inner: o.HTTPClient, r: r}
}

// countingClient counts requests and throttled answers. The SDK's standard
// retryer (NewS3Client) retries a 503 SlowDown of a read or listing with
// jittered exponential backoff within the request's timeout; PUTs are
// never retried by it (the provider retries them, see design.md).
type countingClient struct {
	inner s3.HTTPClient
	r     *S3Repository
}

func (c countingClient) Do(req *http.Request) (*http.Response, error) {
	c.r.requests.Add(1)
	resp, err := c.inner.Do(req)
	if err == nil {
		throttled := resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests
		if throttled {
			c.r.throttled.Add(1)
		}
		c.r.throttle.observe(throttled)
	}
	return resp, err
}

// classify maps an SDK error onto the storage error kinds.
func classify(op, key string, err error) error {
	se := &StorageError{Op: op, Key: key, Err: err, Kind: ErrUnavailable}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		se.Status = re.HTTPStatusCode()
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		se.Code = ae.ErrorCode()
		// The server's words; the SDK's text adds request IDs and the
		// operation, which Op and Key already say.
		se.Detail = ae.ErrorMessage()
	}
	switch {
	case se.Status == http.StatusPreconditionFailed || se.Code == "PreconditionFailed":
		se.Kind = ErrPreconditionFailed
	case se.Status == http.StatusNotFound || se.Code == "NoSuchKey" || se.Code == "NotFound":
		se.Kind = ErrNotFound
	case se.Status == http.StatusConflict || se.Code == "ConditionalRequestConflict":
		se.Kind = ErrConflict
	case se.Code == "SlowDown" || se.Status == http.StatusTooManyRequests:
		se.Kind = ErrSlowDown
	case se.Status == 0 && strings.Contains(err.Error(), "get identity: get credentials:") &&
		!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && !isNetTimeout(err):
		// No answer: the SDK found no usable credentials (none set, or
		// the ECS/EC2 role endpoint refused). Retrying will not help.
		se.Kind, se.Code = ErrAccessDenied, "NoCredentials"
		se.Err = fmt.Errorf("no usable AWS credentials (environment, shared config, ECS task role or EC2 instance role): %w", err)
	case se.Code == "AuthorizationHeaderMalformed" || se.Code == "PermanentRedirect" || se.Status == http.StatusMovedPermanently ||
		errors.Is(err, http.ErrSchemeMismatch) || (se.Status == http.StatusBadRequest && se.Code == ""):
		// S3 names every 400 with a code; one without is not S3 speaking
		// (an HTTPS server answering plain HTTP, a proxy).
		se.Kind = ErrWrongEndpoint
	case se.Status == http.StatusForbidden || se.Status == http.StatusUnauthorized ||
		se.Code == "InvalidAccessKeyId" || se.Code == "SignatureDoesNotMatch" || se.Code == "AccessDenied":
		se.Kind = ErrAccessDenied
	}
	return se
}

// causeText renders err without the SDK's wrappers: their text repeats the
// operation and URL (Op and Key say them) and, when no answer arrived, adds
// "StatusCode: 0, RequestID: , HostID:", which reads like the cause. What
// is left is the network error, a timeout, or the server's error.
func causeText(err error) string {
	attempts := 0
	for {
		var next error
		switch e := err.(type) {
		case *smithy.OperationError, *smithyhttp.ResponseError, *smithyhttp.RequestSendError,
			*smithy.CanceledError, *url.Error:
			next = errors.Unwrap(e)
		case *retry.MaxAttemptsError:
			attempts, next = e.Attempt, e.Err
		case interface {
			error
			ServiceRequestID() string
		}:
			// awshttp.ResponseError, and S3's own (an internal package)
			// that adds HostID.
			next = errors.Unwrap(e)
		}
		if next == nil {
			break
		}
		err = next
	}
	if attempts > 1 {
		return fmt.Sprintf("%v (%d attempts)", err, attempts)
	}
	return err.Error()
}

// isNetTimeout reports a network timeout: a credential endpoint that was
// slow (throttled, or our request timeout ended mid-fetch) may answer the
// next time, unlike one that has no credentials to give.
func isNetTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// serverDate reads the Date header of an answer: the server's clock.
func serverDate(md middleware.Metadata) time.Time {
	if resp, ok := awsmiddleware.GetRawResponse(md).(*smithyhttp.Response); ok {
		if t, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
			return t
		}
	}
	return time.Time{}
}

func normalizeETag(e string) string {
	if e == "" || strings.HasPrefix(e, `"`) {
		return e
	}
	return `"` + e + `"`
}
