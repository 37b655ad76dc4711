package main_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nodeid/nodeid/internal/faultproxy"
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
	// Corrupted just now, its last holder may be valid: --yes (issue 23.4).
	if code, out := release("--data-root", c.root, "--yes"); code != 0 || !strings.Contains(out, "released at version 7") {
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

// Schedule: node 0's holder crashed (SIGKILL) and its lease expired. The
// operator runs `release --node 0 --force` (no --yes: the guard is to
// refuse if the holder looks alive). Its first two GETs are slow (4 s each:
// a congested link). 1. the guard's GET sees v1 held by the dead task,
// renewed more than a lease duration ago: not live, go ahead. 2. a hot
// spare takes node 0 (v2) and renews. 3. ForceRelease GETs again, sees
// v2 held by the spare that acquired a moment ago (L = 2 s, R = 0.8 s; its
// LIST, survey and PUT are fast and land before the next renewal), and
// overwrites it with a
// forced release (If-Match on its own fresh ETag): the spare, renewed
// within its lease duration, is fenced without --yes, and node 0 is
// acquirable at once while the spare's self-fence deadline is still ahead.
// The guard's decision is not tied to the object ForceRelease writes over
// (no ETag passed through).
func TestRevsReleaseGuardIsBypassedByATakeoverInBetween(t *testing.T) {
	srv := s3test.StartVersity(t)
	c := newCluster(t, srv, 1)
	dead := c.runTask("dead", "TMPDIR="+t.TempDir())
	dead.identity(t, 20*time.Second)
	_ = dead.cmd.Process.Signal(syscall.SIGKILL)
	dead.wait(t, 5*time.Second)
	time.Sleep(4 * time.Second) // L = 2s: expired

	proxy := startProxy(t, srv.URL)
	proxy.Set(faultproxy.Fault{Methods: []string{"GET"}, Latency: 4 * time.Second})
	rel := c.start("operator", []string{"AWS_ENDPOINT_URL_S3=" + proxy.URL, "TMPDIR=" + t.TempDir()}, "release", "--node", "0", "--force")
	waitFor(t, 15*time.Second, "the guard's GET answered and the next GET on its way", func() bool { return proxy.Stats().ByMethod["GET"] >= 2 })
	proxy.Set(faultproxy.Fault{}) // the rest of release's requests are fast

	p, err := nodeid.NewProvider(c.repo(), nodeid.Config{TaskID: "spare", ClusterSize: 1, LeaseDuration: 2 * time.Second,
		RenewInterval: 800 * time.Millisecond, PollInterval: 200 * time.Millisecond,
		OnLost: func(error) {}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	inst, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	t.Logf("spare holds node %d v%d while release waits for its second GET", inst.ID, inst.Version)
	// A second spare waits for node 0.
	p3, err := nodeid.NewProvider(c.repo(), nodeid.Config{TaskID: "spare-2", ClusterSize: 1, LeaseDuration: 2 * time.Second,
		RenewInterval: 800 * time.Millisecond, PollInterval: 100 * time.Millisecond, OnLost: func(error) {}})
	if err != nil {
		t.Fatal(err)
	}
	type took struct {
		inst       nodeid.NodeInstance
		firstValid bool // the first spare still believed its lease valid then
		err        error
	}
	tookCh := make(chan took, 1)
	go func() {
		i, err := p3.Acquire(ctx)
		tookCh <- took{i, p.Valid(), err}
	}()
	t.Cleanup(func() { _ = p3.Close(context.Background()) })
	code := rel.wait(t, 30*time.Second)
	out := strings.TrimSpace(rel.out.String())
	select {
	case <-p.Done():
	case <-time.After(3 * time.Second):
	}
	t.Logf("release --force (no --yes): exit %d: %s; spare's provider: %v", code, out, p.Err())
	select {
	case tk := <-tookCh:
		t.Logf("second spare: %+v, err %v; first spare still valid at that moment: %v", tk.inst, tk.err, tk.firstValid)
		if tk.err == nil && tk.firstValid {
			t.Errorf("two valid holders of node 0: spare v%d (not yet aware of the forced release) and spare-2 v%d", inst.Version, tk.inst.Version)
		}
	case <-time.After(5 * time.Second):
		t.Logf("second spare took nothing")
	}
	if code == 0 {
		t.Errorf("release --force without --yes fenced a holder (v%d) that had just acquired and renewed: %s (spare: %v)", inst.Version, out, p.Err())
	}
}
