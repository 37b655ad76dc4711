package main_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	nodeidinit "github.com/nodeid/nodeid/cmd/nodeid-init"
	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// A SIGTERM that arrives after the command was prepared but before it
// starts must stop run: either the command never starts, or it starts and
// gets the signal at once; the lease is released either way. Before the
// fix the acquisition-time watcher swallowed it and run kept the command
// running until SIGKILL.
//
// run kills every process it descends from (killLeftovers), so it runs in a
// child test process, never in this one.
func TestSigtermJustBeforeTheCommandStartsIsNotLost(t *testing.T) {
	if os.Getenv("NODEID_TEST_RUN_HELPER") == "1" {
		nodeidinit.SetBeforeStartHook(func() {
			_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
			// Let the acquisition-time watcher take it, as it could.
			time.Sleep(300 * time.Millisecond)
		})
		os.Exit(nodeidinit.RealMain(context.Background(), []string{"run", "--", "sh", "-c", `touch "$MARK"; exec sleep 60`}, os.Stdout, os.Stderr))
	}
	srv := s3test.NewFake(t)
	dir := t.TempDir()
	root := filepath.Join(dir, "data")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSigtermJustBeforeTheCommandStartsIsNotLost$")
	cmd.Env = []string{"NODEID_TEST_RUN_HELPER=1", "MARK=" + filepath.Join(dir, "started"),
		"PATH=" + os.Getenv("PATH"), "HOME=" + dir,
		"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey,
		"AWS_REGION=" + srv.Region, "AWS_ENDPOINT_URL_S3=" + srv.URL,
		"AWS_CONFIG_FILE=/nonexistent", "AWS_SHARED_CREDENTIALS_FILE=/nonexistent",
		"NODEID_BUCKET=" + srv.Bucket, "NODEID_PREFIX=t/", "NODEID_S3_PATH_STYLE=true",
		"NODEID_CLUSTER_SIZE=1", "NODEID_TASK_ID=t1", "NODEID_DATA_ROOT=" + root,
		"NODEID_LEASE_FILE=" + filepath.Join(dir, "lease.json"),
		"NODEID_LEASE_DURATION=2s", "NODEID_RENEW_INTERVAL=500ms", "NODEID_POLL_INTERVAL=200ms"}
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v\n%s", err, out)
		}
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("run still running 15s after SIGTERM (signal lost):\n%s", out)
	}
	repo, err := nodeid.NewS3Repository(srv.Client(t), srv.Bucket, "t/", 0)
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := repo.Get(context.Background(), 0); err != nil || rec.Lease.Held() {
		t.Fatalf("lease not released: %+v %v\n%s", rec.Lease, err, out)
	}
	_, err = os.Stat(filepath.Join(dir, "started"))
	t.Logf("command started (then stopped by the forwarded signal): %v", err == nil)
}
