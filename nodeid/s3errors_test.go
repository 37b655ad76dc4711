package nodeid_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/nodeid"
)

func TestIsNoSuchBucket(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"code NoSuchBucket", &nodeid.StorageError{Op: "get", Status: 404, Code: "NoSuchBucket", Kind: nodeid.ErrNotFound}, true},
		{"list answered 404", &nodeid.StorageError{Op: "list", Status: 404, Code: "NotFound", Kind: nodeid.ErrNotFound}, true},
		{"wrapped", fmt.Errorf("acquire: %w", &nodeid.StorageError{Op: "list", Code: "NoSuchBucket", Kind: nodeid.ErrNotFound}), true},
		{"missing lease object", &nodeid.StorageError{Op: "get", Status: 404, Code: "NoSuchKey", Kind: nodeid.ErrNotFound}, false},
		{"list unavailable", &nodeid.StorageError{Op: "list", Kind: nodeid.ErrUnavailable}, false},
		{"not a storage error", nodeid.ErrNotFound, false},
	} {
		if got := nodeid.IsNoSuchBucket(c.err); got != c.want {
			t.Errorf("%s: IsNoSuchBucket = %v, want %v", c.name, got, c.want)
		}
	}
}

// Answers that say the request went to the wrong place are their own kind,
// and permanent: acquisition stops at once instead of retrying forever.
func TestWrongEndpointIsPermanent(t *testing.T) {
	xmlError := func(status int, code string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(status)
			fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>test</Message></Error>`, code)
		})
	}
	start := func(h http.Handler) string {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	tlsSrv := httptest.NewUnstartedServer(http.NotFoundHandler())
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0) // its handshake errors are the point
	tlsSrv.StartTLS()
	t.Cleanup(tlsSrv.Close)
	plain := start(http.NotFoundHandler())
	for _, tc := range []struct {
		name, endpoint string
		want           error
	}{
		{"301 PermanentRedirect", start(xmlError(http.StatusMovedPermanently, "PermanentRedirect")), nodeid.ErrWrongEndpoint},
		{"400 AuthorizationHeaderMalformed", start(xmlError(http.StatusBadRequest, "AuthorizationHeaderMalformed")), nodeid.ErrWrongEndpoint},
		{"http:// to an HTTPS server", "http://" + tlsSrv.Listener.Addr().String(), nodeid.ErrWrongEndpoint},
		{"https:// to an HTTP server", "https://" + strings.TrimPrefix(plain, "http://"), nodeid.ErrWrongEndpoint},
		{"403 AccessDenied", start(xmlError(http.StatusForbidden, "AccessDenied")), nodeid.ErrAccessDenied},
		{"400 InvalidArgument", start(xmlError(http.StatusBadRequest, "InvalidArgument")), nodeid.ErrUnavailable},
		{"503 ServiceUnavailable", start(xmlError(http.StatusServiceUnavailable, "ServiceUnavailable")), nodeid.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, err := nodeid.NewS3Client(context.Background(), nodeid.S3Config{Endpoint: tc.endpoint, Region: "us-east-1",
				PathStyle: true, AccessKey: "a", SecretKey: "s"})
			if err != nil {
				t.Fatal(err)
			}
			repo, err := nodeid.NewS3Repository(client, "bucket", "p/", 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			_, err = repo.List(context.Background())
			if !errors.Is(err, tc.want) {
				t.Fatalf("%v, want %v", err, tc.want)
			}
			if permanent := tc.want != nodeid.ErrUnavailable; nodeid.IsPermanent(err) != permanent {
				t.Errorf("IsPermanent(%v) = %v, want %v", err, !permanent, permanent)
			}
		})
	}
}

// A storage error reads as operation, key, kind, status and code, and the
// network error underneath: none of the SDK's empty "StatusCode: 0,
// RequestID: , HostID:" noise, which operators took for the cause.
func TestStorageErrorText(t *testing.T) {
	slowDown := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message><RequestId>R1</RequestId><HostId>H1</HostId></Error>`)
	}))
	t.Cleanup(slowDown.Close)
	for _, tc := range []struct {
		name, endpoint string
		want           []string // in order
		kind           error
	}{
		{"connection refused", "http://127.0.0.1:1", []string{"write p/0.json: storage unavailable: ", "dial tcp 127.0.0.1:1: ", "connection refused"}, nodeid.ErrUnavailable},
		{"503 SlowDown", slowDown.URL, []string{"write p/0.json: slow down (HTTP 503 SlowDown)"}, nodeid.ErrSlowDown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, err := nodeid.NewS3Client(context.Background(), nodeid.S3Config{Endpoint: tc.endpoint, Region: "us-east-1",
				PathStyle: true, AccessKey: "a", SecretKey: "s"})
			if err != nil {
				t.Fatal(err)
			}
			repo, err := nodeid.NewS3Repository(client, "bucket", "p/", 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			_, err = repo.Write(context.Background(), nodeid.Lease{TaskID: "t"}, `"e"`)
			if !errors.Is(err, tc.kind) {
				t.Fatalf("%v, want %v", err, tc.kind)
			}
			msg := err.Error()
			rest := msg
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("error text %q lacks %q (in order %q)", msg, w, tc.want)
				}
				rest = rest[i+len(w):]
			}
			for _, noise := range []string{"StatusCode", "RequestID", "HostID", "operation error", "https response error"} {
				if strings.Contains(msg, noise) {
					t.Errorf("error text %q has the SDK's %q", msg, noise)
				}
			}
			var se *nodeid.StorageError
			if !errors.As(err, &se) || se.Unwrap() == nil {
				t.Fatalf("%v: not a storage error wrapping the SDK's", err)
			}
			t.Logf("%s; underlying: %v", msg, se.Unwrap())
		})
	}
}
