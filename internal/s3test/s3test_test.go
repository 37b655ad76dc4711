package s3test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

func TestMain(m *testing.M) { VersityMain(m) }

// eachServer runs f against a fresh bucket on every server kind.
func eachServer(t *testing.T, f func(t *testing.T, s *Server)) {
	t.Helper()
	for _, kind := range []string{KindFake, KindVersity} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var s *Server
			if kind == KindFake {
				s = NewFake(t)
			} else {
				s = StartVersity(t)
			}
			f(t, s)
		})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// httpStatus returns the HTTP status of a failed SDK call, or 0.
func httpStatus(err error) int {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func put(t *testing.T, c *s3.Client, bucket, key, body string, mod func(*s3.PutObjectInput)) (*s3.PutObjectOutput, error) {
	t.Helper()
	in := &s3.PutObjectInput{
		Bucket: aws.String(bucket),
		Key:    aws.String(key),
		Body:   strings.NewReader(body),
	}
	if mod != nil {
		mod(in)
	}
	return c.PutObject(ctx(t), in)
}

func ifNoneMatch(in *s3.PutObjectInput) { in.IfNoneMatch = aws.String("*") }

func ifMatch(etag string) func(*s3.PutObjectInput) {
	return func(in *s3.PutObjectInput) { in.IfMatch = aws.String(etag) }
}

func wantStatus(t *testing.T, err error, status int, code string) {
	t.Helper()
	if got := httpStatus(err); got != status || errorCode(err) != code {
		t.Fatalf("got error %v (HTTP %d, code %q), want HTTP %d %s", err, got, errorCode(err), status, code)
	}
}

func TestIfNoneMatchCreatesOnce(t *testing.T) {
	eachServer(t, func(t *testing.T, s *Server) {
		c := s.Client(t)
		out, err := put(t, c, s.Bucket, "lease", "v1", ifNoneMatch)
		if err != nil {
			t.Fatalf("first create: %v", err)
		}
		if etag := aws.ToString(out.ETag); !isQuotedMD5(etag) {
			t.Errorf("ETag %q is not a quoted hex MD5", etag)
		}
		_, err = put(t, c, s.Bucket, "lease", "v2", ifNoneMatch)
		wantStatus(t, err, http.StatusPreconditionFailed, "PreconditionFailed")
		if got := get(t, c, s.Bucket, "lease"); got != "v1" {
			t.Errorf("after refused create, body = %q, want v1", got)
		}
	})
}

func TestIfMatch(t *testing.T) {
	eachServer(t, func(t *testing.T, s *Server) {
		c := s.Client(t)
		out, err := put(t, c, s.Bucket, "lease", "v1", ifNoneMatch)
		if err != nil {
			t.Fatal(err)
		}
		etag1 := aws.ToString(out.ETag)

		_, err = put(t, c, s.Bucket, "lease", "v2", ifMatch(`"0123456789abcdef0123456789abcdef"`))
		wantStatus(t, err, http.StatusPreconditionFailed, "PreconditionFailed")

		out, err = put(t, c, s.Bucket, "lease", "v2", ifMatch(etag1))
		if err != nil {
			t.Fatalf("If-Match with current ETag: %v", err)
		}
		etag2 := aws.ToString(out.ETag)
		if etag2 == etag1 {
			t.Errorf("ETag did not change with the body: %s", etag2)
		}
		// The old ETag is now stale.
		_, err = put(t, c, s.Bucket, "lease", "v3", ifMatch(etag1))
		wantStatus(t, err, http.StatusPreconditionFailed, "PreconditionFailed")

		// Both servers accept the ETag without its quotes.
		out, err = put(t, c, s.Bucket, "lease", "v3", ifMatch(strings.Trim(etag2, `"`)))
		if err != nil {
			t.Fatalf("If-Match with unquoted ETag: %v", err)
		}
		etag3 := aws.ToString(out.ETag)

		// The ETag is the MD5 of the content only: rewriting the same body
		// yields the same ETag, so a lease renewal must change the body
		// (e.g. a counter) for If-Match to detect a competing writer.
		out, err = put(t, c, s.Bucket, "lease", "v3", ifMatch(etag3))
		if err != nil {
			t.Fatal(err)
		}
		if got := aws.ToString(out.ETag); got != etag3 {
			t.Errorf("same body gave ETag %s, then %s", etag3, got)
		}
		if got := get(t, c, s.Bucket, "lease"); got != "v3" {
			t.Errorf("body = %q, want v3", got)
		}
	})
}

func TestIfMatchMissingKey(t *testing.T) {
	eachServer(t, func(t *testing.T, s *Server) {
		_, err := put(t, s.Client(t), s.Bucket, "missing", "v1", ifMatch(`"0123456789abcdef0123456789abcdef"`))
		switch s.Kind {
		case KindFake:
			// Differs from AWS S3, which answers 404.
			wantStatus(t, err, http.StatusPreconditionFailed, "PreconditionFailed")
		case KindVersity:
			wantStatus(t, err, http.StatusNotFound, "NoSuchKey")
		}
	})
}

// TestConcurrentCreate races conditional creates of one key: exactly one
// wins. AWS S3 may answer 409 ConditionalRequestConflict to the losers;
// the test records whether a server ever does.
func TestConcurrentCreate(t *testing.T) {
	eachServer(t, func(t *testing.T, s *Server) {
		c := s.Client(t, WithoutRetries())
		const n = 16
		for round := range 3 {
			key := fmt.Sprintf("race-%d", round)
			var wg sync.WaitGroup
			var ok, s412, s409 atomic.Int32
			start := make(chan struct{})
			for i := range n {
				wg.Go(func() {
					<-start
					_, err := put(t, c, s.Bucket, key, fmt.Sprint("writer-", i), ifNoneMatch)
					switch httpStatus(err) {
					case 0:
						if err != nil {
							t.Errorf("writer %d: %v", i, err)
							return
						}
						ok.Add(1)
					case http.StatusPreconditionFailed:
						s412.Add(1)
					case http.StatusConflict:
						s409.Add(1)
					default:
						t.Errorf("writer %d: %v", i, err)
					}
				})
			}
			close(start)
			wg.Wait()
			t.Logf("round %d: %d created, %d got 412, %d got 409", round, ok.Load(), s412.Load(), s409.Load())
			if ok.Load() != 1 {
				t.Errorf("%d writers created %s, want exactly 1", ok.Load(), key)
			}
			if s409.Load() != 0 {
				t.Errorf("%d writers got 409; update the package comment", s409.Load())
			}
		}
	})
}

func TestMetadataRoundTrip(t *testing.T) {
	eachServer(t, func(t *testing.T, s *Server) {
		c := s.Client(t)
		_, err := put(t, c, s.Bucket, "lease", "v1", func(in *s3.PutObjectInput) {
			in.IfNoneMatch = aws.String("*")
			in.Metadata = map[string]string{"taskid": "task-1", "NodeInstance": "Mixed-Case-Value"}
		})
		if err != nil {
			t.Fatal(err)
		}
		head, err := c.HeadObject(ctx(t), &s3.HeadObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String("lease")})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"taskid": "task-1", "nodeinstance": "Mixed-Case-Value"}
		if fmt.Sprint(head.Metadata) != fmt.Sprint(want) {
			t.Errorf("metadata = %v, want %v (keys lowercase, values verbatim)", head.Metadata, want)
		}
	})
}

func TestListObjectsV2(t *testing.T) {
	eachServer(t, func(t *testing.T, s *Server) {
		c := s.Client(t)
		before := time.Now().Add(-2 * time.Second)
		out, err := put(t, c, s.Bucket, "leases/a", "hello", ifNoneMatch)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := put(t, c, s.Bucket, "other", "x", nil); err != nil {
			t.Fatal(err)
		}
		list, err := c.ListObjectsV2(ctx(t), &s3.ListObjectsV2Input{Bucket: aws.String(s.Bucket), Prefix: aws.String("leases/")})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Contents) != 1 {
			t.Fatalf("listed %d objects, want 1", len(list.Contents))
		}
		o := list.Contents[0]
		if aws.ToString(o.Key) != "leases/a" || aws.ToString(o.ETag) != aws.ToString(out.ETag) || aws.ToInt64(o.Size) != 5 {
			t.Errorf("listed key %q ETag %q size %d, want leases/a %s 5", aws.ToString(o.Key), aws.ToString(o.ETag), aws.ToInt64(o.Size), aws.ToString(out.ETag))
		}
		if lm := aws.ToTime(o.LastModified); lm.Before(before) || lm.After(time.Now().Add(2*time.Second)) {
			t.Errorf("LastModified %v is not about now", lm)
		}
	})
}

// TestLastModifiedGranularity records how precise LastModified is: the
// HTTP header has whole seconds on every server, the ListObjectsV2 XML
// depends on the server.
func TestLastModifiedGranularity(t *testing.T) {
	eachServer(t, func(t *testing.T, s *Server) {
		c := s.Client(t)
		// Writes at several instants; with sub-second precision at least one
		// of them lands off a whole second.
		var subSecond bool
		for i := range 4 {
			key := fmt.Sprint("k", i)
			if _, err := put(t, c, s.Bucket, key, "x", nil); err != nil {
				t.Fatal(err)
			}
			head, err := c.HeadObject(ctx(t), &s3.HeadObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(key)})
			if err != nil {
				t.Fatal(err)
			}
			if ns := aws.ToTime(head.LastModified).Nanosecond(); ns != 0 {
				t.Errorf("HeadObject LastModified has sub-second part %dns", ns)
			}
			list, err := c.ListObjectsV2(ctx(t), &s3.ListObjectsV2Input{Bucket: aws.String(s.Bucket), Prefix: aws.String(key)})
			if err != nil {
				t.Fatal(err)
			}
			lm := aws.ToTime(list.Contents[0].LastModified)
			if lm.Nanosecond()%int(time.Millisecond) != 0 {
				t.Errorf("ListObjectsV2 LastModified %v finer than milliseconds", lm)
			}
			if !lm.Truncate(time.Second).Equal(aws.ToTime(head.LastModified)) {
				t.Errorf("list LastModified %v and head %v disagree", lm, aws.ToTime(head.LastModified))
			}
			subSecond = subSecond || lm.Nanosecond() != 0
			time.Sleep(137 * time.Millisecond)
		}
		wantSub := s.Kind == KindFake
		if subSecond != wantSub {
			t.Errorf("ListObjectsV2 sub-second LastModified = %v, want %v", subSecond, wantSub)
		}
	})
}

func TestDateHeader(t *testing.T) {
	eachServer(t, func(t *testing.T, s *Server) {
		out, err := put(t, s.Client(t), s.Bucket, "k", "x", nil)
		if err != nil {
			t.Fatal(err)
		}
		d, err := ResponseDate(out.ResultMetadata)
		if err != nil {
			t.Fatal(err)
		}
		if diff := time.Since(d); diff < -2*time.Second || diff > 2*time.Second {
			t.Errorf("Date %v is %v from now", d, diff)
		}
	})
}

func TestFakeServerClock(t *testing.T) {
	base := time.Date(2031, 2, 3, 4, 5, 6, 789_000_000, time.UTC)
	var offset atomic.Int64
	clock := func() time.Time { return base.Add(time.Duration(offset.Load())) }
	s := NewFake(t, WithServerClock(clock))
	c := s.Client(t)

	out, err := put(t, c, s.Bucket, "k", "x", ifNoneMatch)
	if err != nil {
		t.Fatalf("put with a server clock years ahead: %v", err)
	}
	d, err := ResponseDate(out.ResultMetadata)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Equal(base.Truncate(time.Second)) {
		t.Errorf("Date = %v, want %v", d, base.Truncate(time.Second))
	}

	offset.Store(int64(90 * time.Second))
	head, err := c.HeadObject(ctx(t), &s3.HeadObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := ResponseDate(head.ResultMetadata); !d.Equal(base.Add(90 * time.Second).Truncate(time.Second)) {
		t.Errorf("Date after advancing the clock = %v", d)
	}
	if lm := aws.ToTime(head.LastModified); !lm.Equal(base.Truncate(time.Second)) {
		t.Errorf("HeadObject LastModified = %v, want %v", lm, base.Truncate(time.Second))
	}
	list, err := c.ListObjectsV2(ctx(t), &s3.ListObjectsV2Input{Bucket: aws.String(s.Bucket)})
	if err != nil {
		t.Fatal(err)
	}
	if lm := aws.ToTime(list.Contents[0].LastModified); !lm.Equal(base) {
		t.Errorf("ListObjectsV2 LastModified = %v, want %v", lm, base)
	}
}

func TestFakeSkewLimit(t *testing.T) {
	future := time.Now().Add(time.Hour)
	s := NewFake(t, WithServerClock(func() time.Time { return future }), WithTimeSkewLimit(15*time.Minute))
	_, err := put(t, s.Client(t, WithoutRetries()), s.Bucket, "k", "x", nil)
	wantStatus(t, err, http.StatusForbidden, "RequestTimeTooSkewed")
}

func TestNewBucketIsFresh(t *testing.T) {
	eachServer(t, func(t *testing.T, s *Server) {
		c := s.Client(t)
		if _, err := put(t, c, s.Bucket, "k", "x", nil); err != nil {
			t.Fatal(err)
		}
		b := s.NewBucket(t)
		if b == s.Bucket {
			t.Fatalf("NewBucket returned the existing bucket %s", b)
		}
		list, err := c.ListObjectsV2(ctx(t), &s3.ListObjectsV2Input{Bucket: aws.String(b)})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Contents) != 0 {
			t.Errorf("new bucket has %d objects", len(list.Contents))
		}
	})
}

func TestBucketName(t *testing.T) {
	for _, tc := range []struct {
		name string
		seq  uint64
		want string
	}{
		{"TestFoo/gofakes3", 7, "t7-testfoo-gofakes3"},
		{"Test__X", 1, "t1-test-x"},
		{strings.Repeat("A", 100), 12, "t12-" + strings.Repeat("a", 58)},
	} {
		if got := bucketName(tc.name, tc.seq); got != tc.want {
			t.Errorf("bucketName(%q, %d) = %q, want %q", tc.name, tc.seq, got, tc.want)
		}
	}
}

func get(t *testing.T, c *s3.Client, bucket, key string) string {
	t.Helper()
	b, _ := GetObject(ctx(t), t, c, bucket, key)
	return string(b)
}

func isQuotedMD5(etag string) bool {
	if len(etag) != 34 || etag[0] != '"' || etag[33] != '"' {
		return false
	}
	for _, r := range etag[1:33] {
		if !strings.ContainsRune("0123456789abcdef", r) {
			return false
		}
	}
	return true
}
