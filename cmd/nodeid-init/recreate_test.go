package main_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// Second adversarial review. docs/design.md (Renew, 404): "After stopping,
// the holder recreates the object (If-None-Match: *) as an expiring lease
// of an unknown holder at its own version: with one node ID, or before the
// peers learned the version, only it knows that version". The provider
// does this on its renew goroutine AFTER OnLost returns; `renew` and `run`
// return from their main goroutine as soon as the loss is reported, and
// main calls os.Exit, so the recreation races the exit (and the default
// OnLost of the library exits before it).
//
// Schedule: N = 1. Tenures v1 and v2 come and go (run, child exits 0:
// released). `acquire` takes v3, `renew` adopts it. An operator deletes
// e2e/0.json. renew's next renewal gets 404, it exits 3. One second later
// the object is still missing: the next task recreates it at
// max(known, 1) = 1 and takes v2 again.
func TestRenewRecreatesADeletedObjectAtItsVersion(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 1)
	for _, name := range []string{"a", "b"} {
		if code := c.start(name, nil, "run", "--", "sh", "-c", "exit 0").wait(t, 20*time.Second); code != 0 {
			t.Fatalf("%s exited %d", name, code)
		}
	}
	envDir := t.TempDir()
	envFile := filepath.Join(envDir, "node.env")
	init := c.start("task-c", []string{"NODEID_ENV_FILE=" + envFile}, "acquire")
	if code := init.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("acquire exited %d:\n%s", code, init.out.String())
	}
	sidecar := c.start("task-c", []string{"NODEID_ENV_FILE=" + envFile}, "renew")
	time.Sleep(time.Second) // adopted and renewing
	rec, err := c.repo().Get(context.Background(), 0)
	if err != nil || rec.Lease.Instance.Version != 3 || rec.Lease.TaskID != "task-c" {
		t.Fatalf("before the delete: %+v %v", rec.Lease, err)
	}
	deleteObject(t, c.srv, "e2e/0.json")
	if code := sidecar.wait(t, 5*time.Second); code != 3 {
		t.Fatalf("renew exited %d after the delete, want 3:\n%s", code, sidecar.out.String())
	}
	time.Sleep(time.Second)
	rec, err = c.repo().Get(context.Background(), 0)
	if errors.Is(err, nodeid.ErrNotFound) {
		t.Fatalf("renew (holder of v3) exited 3 without recreating 0.json at its version; the next task recreates it at v1 and takes v2 again:\n%s", sidecar.out.String())
	}
	if err != nil || rec.Lease.Instance.Version < 3 {
		t.Fatalf("after the delete: %+v %v", rec.Lease, err)
	}
}

// The same for `run`.
func TestRunRecreatesADeletedObjectAtItsVersion(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 1)
	for _, name := range []string{"a", "b"} {
		if code := c.start(name, nil, "run", "--", "sh", "-c", "exit 0").wait(t, 20*time.Second); code != 0 {
			t.Fatalf("%s exited %d", name, code)
		}
	}
	tk := c.runTask("holder")
	if _, v, _ := tk.identity(t, 20*time.Second); v != 3 {
		t.Fatalf("holder got v%d", v)
	}
	deleteObject(t, c.srv, "e2e/0.json")
	if code := tk.wait(t, 5*time.Second); code != 3 {
		t.Fatalf("run exited %d after the delete, want 3", code)
	}
	time.Sleep(time.Second)
	rec, err := c.repo().Get(context.Background(), 0)
	if errors.Is(err, nodeid.ErrNotFound) {
		t.Fatalf("run (holder of v3) exited 3 without recreating 0.json at its version:\n%s", tk.out.String())
	}
	if err != nil || rec.Lease.Instance.Version < 3 {
		t.Fatalf("after the delete: %+v %v", rec.Lease, err)
	}
}

func deleteObject(t *testing.T, srv *s3test.Server, key string) {
	t.Helper()
	if _, err := srv.Client(t).DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String(key)}); err != nil {
		t.Fatal(err)
	}
}
