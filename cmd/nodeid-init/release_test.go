package main_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// release --force used to release a corrupt object of a cluster where no
// peer knew the version at version 0: the next holder then got version 1
// again, and data directories rolled back. Now the version must be given,
// is checked against the data root, and never goes down.
func TestForceReleaseNeverLowersTheVersion(t *testing.T) {
	srv := s3test.NewFake(t)
	c := newCluster(t, srv, 1)
	ctx := context.Background()
	if _, err := srv.Client(t).PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(srv.Bucket), Key: aws.String(nodeid.LeaseKey("e2e/", 0)),
		Body: strings.NewReader("not a lease"), Metadata: map[string]string{"version": "x"},
	}); err != nil {
		t.Fatal(err)
	}
	release := func(args ...string) (int, string) {
		tk := c.start("operator", nil, append([]string{"release", "--node", "0", "--force"}, args...)...)
		return tk.wait(t, 20*time.Second), tk.out.String()
	}

	if code, out := release(); code != 2 || !strings.Contains(out, "--version") {
		t.Fatalf("corrupt object, no version known: exit %d, want 2 asking for --version:\n%s", code, out)
	}
	// A valid node-0/v7 in the data root: a lower --version is refused, and
	// with the data root alone the release is at v7.
	v7 := filepath.Join(c.root, "node-0", "v7")
	if err := os.MkdirAll(v7, 0o755); err != nil {
		t.Fatal(err)
	}
	marker := `{"initializedAt":"2026-01-01T00:00:00Z","version":7,"initializedFrom":null}`
	if err := os.WriteFile(filepath.Join(v7, "directory-initialized.json"), []byte(marker), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := release("--version", "3", "--data-root", c.root); code != 2 || !strings.Contains(out, "below node-0/v7") {
		t.Fatalf("--version below the data root: exit %d, want 2:\n%s", code, out)
	}
	if code, out := release("--data-root", c.root); code != 0 || !strings.Contains(out, "released at version 7") {
		t.Fatalf("release with the data root: exit %d:\n%s", code, out)
	}
	rec, err := c.repo().Get(ctx, 0)
	if err != nil || rec.Lease.Held() || rec.Lease.Instance.Version != 7 {
		t.Fatalf("after the release: %+v, %v", rec.Lease, err)
	}
	// A lower --version never lowers a known version.
	if code, out := release("--version", "2"); code != 0 || !strings.Contains(out, "released at version 7") {
		t.Fatalf("release --version 2 over v7: exit %d:\n%s", code, out)
	}
}
