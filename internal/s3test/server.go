// Package s3test starts S3-compatible servers for tests: an in-process
// gofakes3 (NewFake) and a VersityGW subprocess (StartVersity), both with
// a fresh bucket and a matching SDK client.
//
// The lease protocol depends on conditional writes (If-None-Match: * and
// If-Match), user metadata, ListObjectsV2 and the server's Date header. The
// servers differ from AWS S3 and from each other as follows (each point is
// asserted by this package's tests, see s3test_test.go):
//
//   - PutObject If-Match on a missing key: gofakes3 v1.2.0 answers 412
//     PreconditionFailed; AWS S3 and VersityGW v1.8.0 answer 404 NoSuchKey.
//   - 409 ConditionalRequestConflict: AWS S3 may answer 409 to concurrent
//     conditional writes of one key. gofakes3 never does; racing
//     If-None-Match: * writes give one 200 and 412 for the rest. VersityGW
//     serialises conditional publishes with a lock file and in our tests
//     also gave one 200 and only 412s.
//   - ETags are quoted hex MD5 ("\"5d41...\"") on both, in PutObject,
//     HeadObject and ListObjectsV2. Both accept If-Match with or without
//     the quotes.
//   - Last-Modified: the HTTP header (HeadObject) has whole seconds on both.
//     In ListObjectsV2 gofakes3 reports milliseconds, VersityGW whole
//     seconds (AWS S3 reports milliseconds). ETags depend on the content
//     only: rewriting the same body gives the same ETag.
//   - Date: both send a Date header (second granularity). For the fake it
//     follows WithServerClock; VersityGW uses the host's real clock.
//   - User metadata keys come back lowercase on both (x-amz-meta-taskid),
//     whatever case they were written in.
//   - Signatures: gofakes3 does not verify SigV4 signatures; VersityGW
//     does, so a proxy that alters signed headers (If-Match, If-None-Match)
//     gets 403 SignatureDoesNotMatch from VersityGW only.
package s3test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// Kinds of Server.
const (
	KindFake    = "gofakes3"
	KindVersity = "versitygw"
)

// Server describes a running S3-compatible endpoint with a bucket that
// belongs to the calling test.
type Server struct {
	// Kind is KindFake or KindVersity, for tests that must allow for the
	// documented differences between servers.
	Kind string
	// URL is the endpoint, e.g. "http://127.0.0.1:34567", for path-style
	// addressing.
	URL    string
	Bucket string

	AccessKey string
	SecretKey string
	Region    string
}

// Client returns an S3 client for s with static credentials and path-style
// addressing. optFns are applied last, so a test can for example point the
// client at a fault-injecting proxy (WithEndpoint) or disable retries.
//
// Checksums are only computed and validated when an operation requires
// them, because gofakes3 rejects the SDK's default streaming (aws-chunked)
// checksum uploads and such a setting keeps the two servers comparable.
func (s *Server) Client(t testing.TB, optFns ...func(*s3.Options)) *s3.Client {
	t.Helper()
	opts := s3.Options{
		Region:                     s.Region,
		Credentials:                credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
		BaseEndpoint:               aws.String(s.URL),
		UsePathStyle:               true,
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	}
	return s3.New(opts, optFns...)
}

// WithEndpoint is an option for Client that sends requests to url instead
// of the server's own URL, typically a proxy in front of it.
func WithEndpoint(url string) func(*s3.Options) {
	return func(o *s3.Options) { o.BaseEndpoint = aws.String(url) }
}

// WithoutRetries is an option for Client that makes every request a single
// attempt, so tests observe injected faults directly.
func WithoutRetries() func(*s3.Options) {
	return func(o *s3.Options) { o.RetryMaxAttempts = 1 }
}

// GetObject reads key whole and returns its body and the rest of the answer
// (metadata, ETag), failing the test when it cannot.
func GetObject(ctx context.Context, t testing.TB, c *s3.Client, bucket, key string) ([]byte, *s3.GetObjectOutput) {
	t.Helper()
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b, out
}

// bucketSeq makes bucket names unique within the test binary, which matters
// when tests share one VersityGW process.
var bucketSeq atomic.Uint64

// NewBucket creates another empty bucket on s and returns its name. The
// name contains the test's name to ease debugging of a shared server.
func (s *Server) NewBucket(t testing.TB) string {
	t.Helper()
	name := bucketName(t.Name(), bucketSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Client(t).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("s3test: create bucket %q on %s: %v", name, s.Kind, err)
	}
	return name
}

// bucketName returns a valid S3 bucket name (3-63 characters of lowercase
// letters, digits and hyphens, starting and ending with a letter or digit).
func bucketName(testName string, seq uint64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "t%d", seq)
	hyphen := true // suppress leading and repeated hyphens
	for _, r := range strings.ToLower(testName) {
		if b.Len() >= 62 {
			break
		}
		if ('a' <= r && r <= 'z') || ('0' <= r && r <= '9') {
			if hyphen {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			hyphen = false
		} else {
			hyphen = true
		}
	}
	return strings.TrimRight(b.String()[:min(b.Len(), 63)], "-")
}

// ResponseDate returns the Date header of the HTTP response behind an SDK
// operation's output, e.g. ResponseDate(out.ResultMetadata). The lease
// protocol uses it as the server's clock reading.
func ResponseDate(md middleware.Metadata) (time.Time, error) {
	resp, ok := awsmiddleware.GetRawResponse(md).(*smithyhttp.Response)
	if !ok || resp == nil {
		return time.Time{}, errors.New("s3test: no raw HTTP response in result metadata")
	}
	d := resp.Header.Get("Date")
	if d == "" {
		return time.Time{}, errors.New("s3test: response has no Date header")
	}
	return http.ParseTime(d)
}
