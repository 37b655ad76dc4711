package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nodeid/nodeid/nodeid"
)

// A 403 before any lease was held is a configuration error (exit 2) that
// names what to fix; once a lease was held the same configuration worked,
// and a 403 (a policy changed, credentials revoked) stays a storage error
// (exit 1): the task is replaced, as on any S3 failure.
func TestAccessDeniedIsConfigurationOnlyAtStartup(t *testing.T) {
	denied := func() error {
		return fmt.Errorf("release: %w", &nodeid.StorageError{Op: "write", Key: "p/0.json", Status: 403, Code: "AccessDenied", Kind: nodeid.ErrAccessDenied})
	}
	s := &settings{bucket: "b", prefix: "p/", sources: map[string]string{"bucket": "NODEID_BUCKET"}}
	start := &invocation{settings: s}
	err := classifyExit(start, denied())
	if code := exitCode(err); code != exitUsage || !strings.Contains(err.Error(), "IAM policy") || !strings.Contains(err.Error(), "s3://b/p/") {
		t.Errorf("at start-up: exit %d, %v", code, err)
	}
	tenure := &invocation{settings: s}
	tenure.beginTenure()
	err = classifyExit(tenure, denied())
	if code := exitCode(err); code != exitError || strings.Contains(err.Error(), "IAM policy") {
		t.Errorf("during a tenure: exit %d, %v", code, err)
	}
	wrong := &nodeid.StorageError{Op: "write", Key: "p/0.json", Status: 301, Code: "PermanentRedirect", Kind: nodeid.ErrWrongEndpoint}
	if code := exitCode(classifyExit(tenure, wrong)); code != exitError {
		t.Errorf("a redirect during a tenure: exit %d", code)
	}
}
