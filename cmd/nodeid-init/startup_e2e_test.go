package main_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nodeid/nodeid/internal/s3test"
)

// s3ErrorServer answers every request with an S3 error document and counts
// the requests.
func s3ErrorServer(t *testing.T, status int, code, msg string) (string, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>%s</Message></Error>`, code, msg)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &n
}

// A wrong region, endpoint scheme or credentials, or a redirect, at start-up
// is a configuration error: exit 2, one line naming the cause and the
// setting to fix, nothing written. With --skip-probe too, where the first
// request is acquisition's, which must not retry forever.
func TestStartupMisconfigurationExitsTwoNamingTheFix(t *testing.T) {
	srv := s3test.StartVersity(t)
	c := newCluster(t, srv, 1)
	redirect, _ := s3ErrorServer(t, http.StatusMovedPermanently, "PermanentRedirect",
		"The bucket you are attempting to access must be addressed using the specified endpoint.")
	malformed, _ := s3ErrorServer(t, http.StatusBadRequest, "AuthorizationHeaderMalformed",
		`The authorization header is malformed; the region 'us-east-1' is wrong; expecting 'eu-west-1'`)
	tlsSrv := httptest.NewUnstartedServer(http.NotFoundHandler())
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0)
	tlsSrv.StartTLS()
	defer tlsSrv.Close()
	// Room for the requests on a loaded machine: a request timeout would be
	// a transient error (exit 1).
	slowS3 := []string{"NODEID_LEASE_DURATION=8s", "NODEID_RENEW_INTERVAL=2s"}
	versityHTTPS := "https://" + strings.TrimPrefix(srv.URL, "http://")
	denied, _ := s3ErrorServer(t, http.StatusForbidden, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records.")
	all := [][]string{{"run"}, {"run", "--skip-probe"}, {"status"}}
	// A PUT (the probe's first request) to an HTTPS server may see the
	// connection reset before the server's 400 arrives: no answer, as on a
	// network fault. Only requests without a body are judged here.
	gets := [][]string{{"run", "--skip-probe"}, {"status"}}
	cases := []struct {
		name string
		env  []string
		args []string
		cmds [][]string
		want []string
	}{
		{"wrong region", []string{"NODEID_S3_REGION=eu-west-1"}, nil, all, []string{"wrong region: set NODEID_S3_REGION (now eu-west-1) to the bucket's region", "AuthorizationHeaderMalformed"}},
		{"wrong region by the old flag", nil, []string{"--region", "eu-west-1"}, all, []string{"wrong region: set --region (now eu-west-1)"}},
		{"wrong region from AWS_REGION", []string{"AWS_REGION=eu-west-1"}, nil, all, []string{"wrong region: set NODEID_S3_REGION (or AWS_REGION, now eu-west-1)"}},
		{"wrong secret key", []string{"AWS_SECRET_ACCESS_KEY=wrong"}, nil, all, []string{"access denied", "AWS_SECRET_ACCESS_KEY"}},
		{"unknown access key", []string{"AWS_ENDPOINT_URL_S3=" + denied}, nil, all, []string{"access denied: unknown access key: check AWS_ACCESS_KEY_ID", "InvalidAccessKeyId"}},
		{"https to an HTTP server", []string{"AWS_ENDPOINT_URL_S3=" + versityHTTPS}, nil, all, []string{"wrong endpoint scheme", "use http:// in AWS_ENDPOINT_URL_S3"}},
		{"http to an HTTPS server", []string{"NODEID_S3_ENDPOINT=http://" + tlsSrv.Listener.Addr().String()}, nil, gets, []string{"wrong endpoint scheme", "use https:// in NODEID_S3_ENDPOINT"}},
		{"301 PermanentRedirect", []string{"AWS_ENDPOINT_URL_S3=" + redirect}, nil, all, []string{"the bucket is not at this endpoint", "NODEID_S3_REGION", "AWS_ENDPOINT_URL_S3 to the bucket's regional endpoint", "PermanentRedirect"}},
		{"400 AuthorizationHeaderMalformed", []string{"AWS_ENDPOINT_URL_S3=" + malformed}, nil, all, []string{"wrong region", "expecting 'eu-west-1'"}},
	}
	for _, tc := range cases {
		for _, cmd := range tc.cmds {
			name := tc.name + "/" + strings.Join(cmd, " ")
			t.Run(name, func(t *testing.T) {
				args := append(append([]string{}, cmd...), tc.args...)
				if cmd[0] == "run" {
					args = append(args, "--", "true")
				}
				tmp := t.TempDir()
				code, stdout, stderr := c.runCmd(t, append(append([]string{"TMPDIR=" + tmp}, slowS3...), tc.env...), args...)
				if code != 2 {
					t.Errorf("exit %d, want 2:\n%s", code, stderr)
				}
				// The last line is the error; before it only the log of
				// the start (--skip-probe's warning, the SDK's own).
				lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
				last := lines[len(lines)-1]
				for _, w := range tc.want {
					if !strings.Contains(last, w) {
						t.Errorf("the final line does not contain %q:\n%s", w, stderr)
					}
				}
				if !strings.HasPrefix(last, "nodeid-init "+cmd[0]+": ") || strings.Contains(last, "storage unavailable") {
					t.Errorf("final line %q", last)
				}
				if strings.Contains(stderr, "goroutine ") || strings.Contains(stderr, "panic") || strings.Contains(stderr, "retrying") {
					t.Errorf("stack trace or retries:\n%s", stderr)
				}
				if cmd[0] == "run" && stdout != "" {
					t.Errorf("stdout: %q", stdout)
				}
			})
		}
	}
	if l, err := c.repo().List(context.Background()); err != nil || len(l.Slots) != 0 {
		t.Errorf("misconfigured tasks wrote lease objects: %+v %v", l.Slots, err)
	}
	if entries, err := os.ReadDir(c.root); err != nil || len(entries) != 0 {
		t.Errorf("misconfigured tasks wrote to the data root: %v %v", entries, err)
	}
}
