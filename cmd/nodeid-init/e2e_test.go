package main_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/faultproxy"
	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// These tests build nodeid-init and run it as separate processes against
// VersityGW (or the in-process gofakes3 where a test needs a fault proxy).

var binary string

func TestMain(m *testing.M) {
	if os.Getenv("NODEID_TEST_RUN_HELPER") == "1" {
		os.Exit(m.Run()) // a test re-running this binary as nodeid-init
	}
	dir, err := os.MkdirTemp("", "nodeid-init-e2e-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "nodeid-init")
	// With the test switches (NODEID_TEST_*, testhooks_nodeidtest.go).
	out, err := exec.Command("go", "build", "-tags", "nodeidtest", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build nodeid-init: %v\n%s", err, out)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	s3test.VersityMain(m)
}

// cluster is one bucket and the environment every task of it shares.
type cluster struct {
	t    *testing.T
	srv  *s3test.Server
	env  []string
	root string // shared data root
	dir  string // scratch: children's reports
}

func newCluster(t *testing.T, srv *s3test.Server, size int) *cluster {
	c := &cluster{t: t, srv: srv, root: t.TempDir(), dir: t.TempDir()}
	c.env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + t.TempDir(),
		"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey,
		"AWS_REGION=" + srv.Region, "AWS_ENDPOINT_URL_S3=" + srv.URL,
		"AWS_CONFIG_FILE=/nonexistent", "AWS_SHARED_CREDENTIALS_FILE=/nonexistent",
		"NODEID_BUCKET=" + srv.Bucket, "NODEID_PREFIX=e2e/", "NODEID_S3_PATH_STYLE=true",
		fmt.Sprintf("NODEID_CLUSTER_SIZE=%d", size),
		"NODEID_LEASE_DURATION=2s", "NODEID_RENEW_INTERVAL=500ms", "NODEID_POLL_INTERVAL=200ms",
		"NODEID_DATA_ROOT=" + c.root,
		// run's default lease file is $TMPDIR/nodeid-<uid>/lease.json: one
		// per cluster, not the host's /tmp.
		"TMPDIR=" + t.TempDir(),
	}
	return c
}

// task is one nodeid-init process.
type task struct {
	name   string
	cmd    *exec.Cmd
	out    *syncBuffer
	done   chan struct{}
	code   int
	report string // file the child writes "NODE_ID NODE_VERSION" to
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// childScript reports the identity, appends to a file in the data
// directory, then sleeps until killed.
const childScript = `echo "$NODE_ID $NODE_VERSION $NODE_PREVIOUS_GRACEFUL" > "$REPORT"; echo "written by $NODE_TASK_ID v$NODE_VERSION" >> "$NODE_DATA_DIR/data.log"; exec sleep 300`

// start runs nodeid-init with args; extra env entries override the cluster's.
func (c *cluster) start(name string, env []string, args ...string) *task {
	c.t.Helper()
	return c.startProgram(name, env, binary, args...)
}

// startProgram is start with another program, e.g. one that runs
// nodeid-init.
func (c *cluster) startProgram(name string, env []string, prog string, args ...string) *task {
	c.t.Helper()
	tk := &task{name: name, out: &syncBuffer{}, done: make(chan struct{}), report: filepath.Join(c.dir, name+".report")}
	tk.cmd = exec.Command(prog, args...)
	tk.cmd.Env = append(append(append([]string{}, c.env...), "NODEID_TASK_ID="+name, "REPORT="+tk.report), env...)
	tk.cmd.Stdout, tk.cmd.Stderr = tk.out, tk.out
	if err := tk.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() {
		err := tk.cmd.Wait()
		tk.code = 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			tk.code = ee.ExitCode()
		}
		close(tk.done)
	}()
	c.t.Cleanup(func() {
		_ = tk.cmd.Process.Kill()
		<-tk.done
		if c.t.Failed() {
			c.t.Logf("--- output of %s:\n%s", name, tk.out.String())
		}
	})
	return tk
}

// runTask starts `nodeid-init run -- sh -c childScript`.
func (c *cluster) runTask(name string, env ...string) *task {
	return c.start(name, env, "run", "--", "sh", "-c", childScript)
}

// identity waits for the child's report: node ID, version, graceful.
func (tk *task) identity(t *testing.T, timeout time.Duration) (int, int, bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(tk.report); err == nil && bytes.HasSuffix(b, []byte("\n")) {
			var id, v int
			var graceful bool
			if _, err := fmt.Sscanf(string(b), "%d %d %t", &id, &v, &graceful); err == nil {
				return id, v, graceful
			}
		}
		select {
		case <-tk.done:
			t.Fatalf("%s exited with %d before its child reported:\n%s", tk.name, tk.code, tk.out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("%s: no report after %v:\n%s", tk.name, timeout, tk.out.String())
	return 0, 0, false
}

func (tk *task) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-tk.done:
		return tk.code
	case <-time.After(timeout):
		t.Fatalf("%s still running after %v:\n%s", tk.name, timeout, tk.out.String())
		return -1
	}
}

func (tk *task) running() bool {
	select {
	case <-tk.done:
		return false
	default:
		return true
	}
}

func (c *cluster) repo() *nodeid.S3Repository {
	client, err := nodeid.NewS3Client(context.Background(), nodeid.S3Config{Endpoint: c.srv.URL, Region: c.srv.Region,
		PathStyle: true, AccessKey: c.srv.AccessKey, SecretKey: c.srv.SecretKey})
	if err != nil {
		c.t.Fatal(err)
	}
	r, err := nodeid.NewS3Repository(client, c.srv.Bucket, "e2e/", 0)
	if err != nil {
		c.t.Fatal(err)
	}
	return r
}

func processAlive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// childPID finds the pid of the child from the supervisor's log line. The
// child can report before the supervisor has logged that line (it runs as
// soon as it is started), so it waits for the line.
func childPID(t *testing.T, tk *task) int {
	t.Helper()
	var pid int
	waitFor(t, 10*time.Second, "the \"command started\" line of "+tk.name, func() bool {
		sc := bufio.NewScanner(strings.NewReader(tk.out.String()))
		for sc.Scan() {
			line := sc.Text()
			if !strings.Contains(line, "msg=\"command started\"") {
				continue
			}
			if j := strings.Index(line, " pid="); j >= 0 {
				if _, err := fmt.Sscanf(line[j+5:], "%d", &pid); err == nil && pid > 0 {
					return true
				}
			}
		}
		return false
	})
	return pid
}

func TestThreeTasksThenKill9AndAWaiterTakesOver(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 3)
	tasks := map[int]*task{}
	for i := 0; i < 3; i++ {
		tk := c.runTask(fmt.Sprintf("task-%d", i))
		id, v, _ := tk.identity(t, 20*time.Second)
		if tasks[id] != nil || v != 1 {
			t.Fatalf("%s got node %d v%d (already taken: %v)", tk.name, id, v, tasks[id] != nil)
		}
		tasks[id] = tk
	}
	waiter := c.runTask("waiter")
	waitFor(t, 20*time.Second, "the fourth task to wait", func() bool { return strings.Contains(waiter.out.String(), "no node id free, waiting") })
	if _, err := os.Stat(waiter.report); err == nil {
		t.Fatal("a fourth task started its command while every ID was held")
	}

	victim := tasks[1]
	pid := childPID(t, victim)
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	victim.wait(t, 5*time.Second)
	waitFor(t, 3*time.Second, "the child of the killed supervisor to die", func() bool { return !processAlive(pid) })

	id, v, graceful := waiter.identity(t, 20*time.Second)
	if id != 1 || v != 2 || graceful {
		t.Fatalf("waiter got node %d v%d graceful=%v; want node 1 v2 after a crash", id, v, graceful)
	}
	// v2 was copied from v1, not linked: the killed holder could have been
	// a paused one still writing.
	old := filepath.Join(c.root, "node-1", "v1", "data.log")
	cur := filepath.Join(c.root, "node-1", "v2", "data.log")
	waitFor(t, 3*time.Second, "the waiter's child to append", func() bool {
		b, _ := os.ReadFile(cur)
		return strings.Count(string(b), "\n") == 2
	})
	b, _ := os.ReadFile(cur)
	if !strings.HasPrefix(string(b), "written by task-") || !strings.Contains(string(b), "written by waiter v2") {
		t.Errorf("v2 data.log = %q, want v1's line then the waiter's", b)
	}
	fo, err := os.Stat(old)
	if err != nil {
		t.Fatal(err)
	}
	fc, err := os.Stat(cur)
	if err != nil {
		t.Fatal(err)
	}
	if os.SameFile(fo, fc) {
		t.Error("v2/data.log is a hard link to v1's after an ungraceful takeover")
	}
}

func TestSigtermReleasesAndAWaiterTakesOverWithinASecond(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 1)
	holder := c.runTask("holder")
	holder.identity(t, 20*time.Second)
	waiter := c.runTask("waiter", "NODEID_POLL_INTERVAL=1s") // the default
	waitFor(t, 20*time.Second, "the waiter to wait", func() bool { return strings.Contains(waiter.out.String(), "no node id free, waiting") })

	stopped := time.Now()
	if err := holder.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := holder.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("holder exited %d after SIGTERM, want 0", code)
	}
	_, v, graceful := waiter.identity(t, 10*time.Second)
	took := time.Since(stopped)
	// Taken as a release (graceful, v2), not after an expiry, which the
	// cluster's 2 s lease and S3's whole seconds put at 3 s or more after
	// the holder's last renewal. How fast is for make bench (docs/benchmarks.md:
	// handover median 0.435 s); a loaded machine may stretch it.
	if v != 2 || !graceful {
		t.Fatalf("waiter got v%d graceful=%v, want v2 after a release", v, graceful)
	}
	if !strings.Contains(holder.out.String(), "released node id") {
		t.Errorf("the holder did not log its release:\n%s", holder.out.String())
	}
	t.Logf("handover took %v", took.Round(time.Millisecond))
	// After a release the whole directory is hard-linked.
	v1, err := os.Stat(filepath.Join(c.root, "node-0", "v1", "data.log"))
	if err != nil {
		t.Fatal(err)
	}
	v2, err := os.Stat(filepath.Join(c.root, "node-0", "v2", "data.log"))
	if err != nil || !os.SameFile(v1, v2) {
		t.Errorf("v2/data.log is not a hard link of v1's after a graceful handover (%v)", err)
	}
}

func TestOutsideOverwriteKillsTheChildAndExits3(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 3)
	tk := c.runTask("holder")
	id, v, _ := tk.identity(t, 20*time.Second)
	pid := childPID(t, tk)
	body := fmt.Sprintf(`{"taskId":"abc","timestamp":%d,"nodeInstance":{"id":%d,"version":%d},"knownVersionMappings":{"mappingsByNodeId":{}}}`,
		time.Now().Add(time.Hour).UnixMilli(), id, v)
	putObject(t, c.srv, "e2e/"+nodeid.LeaseKey("", id), body, map[string]string{"taskid": "abc", "version": fmt.Sprint(v), "acquirable": "true"})
	if code := tk.wait(t, 5*time.Second); code != 3 {
		t.Fatalf("exit code %d after the lease was overwritten, want 3", code)
	}
	if processAlive(pid) {
		t.Fatal("child still alive after the lease was lost")
	}
	if !strings.Contains(tk.out.String(), "command killed: lease lost") {
		t.Errorf("no loss line in the output")
	}
}

func TestChildExitCodeIsPassedThroughAndTheLeaseReleased(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 1)
	tk := c.start("t", nil, "run", "--", "sh", "-c", "exit 7")
	if code := tk.wait(t, 20*time.Second); code != 7 {
		t.Fatalf("exit code %d, want the child's 7", code)
	}
	rec, err := c.repo().Get(context.Background(), 0)
	if err != nil || rec.Lease.Held() || rec.Lease.Instance.Version != 1 {
		t.Fatalf("lease after the child exited: %+v %v", rec.Lease, err)
	}
}

func TestAcquireThenRenewKeepsTheLease(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 2)
	envDir := t.TempDir()
	envFile := filepath.Join(envDir, "node.env")
	leaseFile := filepath.Join(envDir, "lease.json")
	init := c.start("task-a", []string{"NODEID_ENV_FILE=" + envFile, "NODEID_LEASE_FILE=" + leaseFile, "NODEID_ADVERTISE_ADDRESS=10.0.0.7:9092"}, "acquire")
	if code := init.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("acquire exited %d:\n%s", code, init.out.String())
	}
	env := sourceEnvFile(t, envFile)
	for k, v := range map[string]string{"NODE_VERSION": "1", "NODE_DATA_DIR": filepath.Join(c.root, "node-"+env["NODE_ID"], "v1"), "NODE_CLUSTER_SIZE": "2",
		"NODE_PREVIOUS_GRACEFUL": "true", "NODE_HANDOFF_FILE": filepath.Join(envDir, "nodeid-handoff.json"), "NODE_LEASE_FILE": leaseFile} {
		if env[k] != v {
			t.Errorf("env file: %s=%q, want %q: %v", k, env[k], v, env)
		}
	}
	// The sidecar learns the task ID and the cluster size from the hand-off.
	sidecar := c.start("task-a", []string{"NODEID_ENV_FILE=" + envFile, "NODEID_LEASE_FILE=" + leaseFile, "NODEID_TASK_ID=", "NODEID_CLUSTER_SIZE=",
		"NODEID_ADVERTISE_ADDRESS=10.0.0.7:9092"}, "renew")
	time.Sleep(3 * time.Second) // longer than the 2s lease
	if !sidecar.running() {
		t.Fatalf("renew exited %d:\n%s", sidecar.code, sidecar.out.String())
	}
	health := exec.Command(binary, "health", "--lease-file", leaseFile)
	if out, err := health.CombinedOutput(); err != nil {
		t.Fatalf("health: %v %s", err, out)
	}
	listing := c.status(t)
	if !strings.Contains(listing, "held") || !strings.Contains(listing, "task-a") || !strings.Contains(listing, "10.0.0.7:9092") {
		t.Fatalf("status while renewing:\n%s", listing)
	}
	if err := sidecar.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := sidecar.wait(t, 5*time.Second); code != 0 {
		t.Fatalf("renew exited %d on SIGTERM", code)
	}
	if err := exec.Command(binary, "health", "--lease-file", leaseFile).Run(); err == nil {
		t.Fatal("health passes after release")
	}
}

func (c *cluster) status(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"status"}, args...)...)
	cmd.Env = c.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	return string(out)
}

func TestTaskARNFromTheECSMetadataEndpoint(t *testing.T) {
	const arn = "arn:aws:ecs:eu-west-1:123456789012:task/prod/0123456789abcdef"
	meta := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v4/abc/task" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, `{"Cluster":"prod","TaskARN":%q,"Family":"broker","Containers":[{"Name":"broker","Networks":[{"NetworkMode":"awsvpc","IPv4Addresses":["10.0.1.23"]}]}]}`, arn)
	}))
	defer meta.Close()
	c := newCluster(t, s3test.StartVersity(t), 1)
	envFile := filepath.Join(t.TempDir(), "node.env")
	tk := c.start("ignored", []string{"NODEID_TASK_ID=", "ECS_CONTAINER_METADATA_URI_V4=" + meta.URL + "/v4/abc", "NODEID_ENV_FILE=" + envFile}, "acquire")
	if code := tk.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("acquire exited %d", code)
	}
	if env := sourceEnvFile(t, envFile); env["NODE_TASK_ID"] != arn {
		t.Fatalf("env file: %v", env)
	}
	rec, err := c.repo().Get(context.Background(), 0)
	if err != nil || rec.Lease.TaskID != arn {
		t.Fatalf("lease holder %q, %v", rec.Lease.TaskID, err)
	}
	// The task's awsvpc address is published as its address.
	if rec.Lease.Address != "10.0.1.23" || !strings.Contains(tk.out.String(), `source="ECS task metadata"`) {
		t.Fatalf("lease address %q:\n%s", rec.Lease.Address, tk.out.String())
	}
}

func TestStatusShowsEveryState(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 3)
	tk := c.runTask("holder", "NODEID_ALLOWED_IDS=0")
	tk.identity(t, 20*time.Second)
	putObject(t, c.srv, "e2e/2.json", "garbage", map[string]string{"version": "1"})
	out := c.status(t, "--json")
	for _, want := range []string{`"state": "held"`, `"state": "released"`, `"state": "corrupt"`, `"taskId": "holder"`} {
		if !strings.Contains(out, want) {
			t.Errorf("status --json lacks %s:\n%s", want, out)
		}
	}
	table := c.status(t)
	if !strings.Contains(table, "NODE") || !strings.Contains(table, "corrupt") {
		t.Errorf("status table:\n%s", table)
	}
}

func TestMetricsAndHealthEndpoints(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 1)
	addr := freeAddr(t)
	tk := c.runTask("holder", "NODEID_METRICS_ADDR="+addr)
	tk.identity(t, 20*time.Second)
	time.Sleep(700 * time.Millisecond) // a renewal
	for path, want := range map[string]string{
		"/healthz": "ok", "/readyz": "ok",
		"/metrics": "nodeid_lease_held 1",
	} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Errorf("%s: %d %q, want %q", path, resp.StatusCode, truncate(string(b), 200), want)
		}
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, series := range []string{"nodeid_node_id 0", "nodeid_lease_version 1", "nodeid_renewals_total", "nodeid_renewal_duration_seconds_bucket",
		"nodeid_acquire_attempts_total 1", `nodeid_node_lease_version{node_id="0"} 1`, "nodeid_self_fence_remaining_seconds ", "nodeid_lease_transitions_total{to=\"held\"} 1", "nodeid_self_fences_total 0", "nodeid_renewal_failures_total", "nodeid_cluster_size 1", "nodeid_waiting 0", "go_goroutines", "process_open_fds",
		"nodeid_build_info{commit="} {
		if !strings.Contains(string(b), series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func TestProbeRefusalExits4(t *testing.T) {
	srv := s3test.NewFake(t)
	proxy := startProxy(t, srv.URL)
	proxy.Set(faultproxy.Fault{StripConditional: true})
	c := newCluster(t, srv, 1)
	c.env = append(c.env, "AWS_ENDPOINT_URL_S3="+proxy.URL)
	tk := c.runTask("t")
	if code := tk.wait(t, 20*time.Second); code != 4 {
		t.Fatalf("exit code %d against a store that ignores preconditions, want 4:\n%s", code, tk.out.String())
	}
	if l, err := c.repo().List(context.Background()); err != nil || len(l.Slots) != 0 {
		t.Fatalf("lease objects written although the probe failed: %+v %v", l.Slots, err)
	}
}

func TestAcquireTimeoutExits5(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 1)
	c.runTask("holder").identity(t, 20*time.Second)
	tk := c.runTask("late", "NODEID_ACQUIRE_TIMEOUT=1s")
	if code := tk.wait(t, 10*time.Second); code != 5 {
		t.Fatalf("exit code %d, want 5", code)
	}
}

func freeAddr(t *testing.T) string {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.Listener.Addr().String()
	srv.Close()
	return addr
}

// startProxy starts a fault proxy in front of target, closed when the
// test ends.
func startProxy(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	proxy, err := faultproxy.Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	return proxy
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestBadInputGetsOneLineAndTheDocumentedCode(t *testing.T) {
	srv := s3test.StartVersity(t)
	c := newCluster(t, srv, 2)
	missingDir := filepath.Join(t.TempDir(), "nope")
	tmplDir := t.TempDir()
	tmpl := func(name, text string) string {
		p := filepath.Join(tmplDir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p + ":" + filepath.Join(tmplDir, name+".out")
	}
	okTmpl, _, _ := strings.Cut(tmpl("ok.tmpl", "ok"), ":")
	slowS3 := []string{"NODEID_LEASE_DURATION=8s", "NODEID_RENEW_INTERVAL=2s"}
	cases := []struct {
		name string
		env  []string
		args []string
		code int
		want string
	}{
		{"unknown flag", nil, []string{"run", "--frobnicate", "--", "true"}, 2, "flag provided but not defined"},
		{"bad duration", []string{"NODEID_LEASE_DURATION=fifteen"}, []string{"run", "--", "true"}, 2, "NODEID_LEASE_DURATION"},
		{"bad duration flag wins", []string{"NODEID_LEASE_DURATION=15s"}, []string{"run", "--lease-duration", "-3s", "--", "true"}, 2, "--lease-duration"},
		{"negative size", nil, []string{"run", "--cluster-size", "-1", "--", "true"}, 2, "cluster-size"},
		{"missing bucket", []string{"NODEID_BUCKET="}, []string{"run", "--", "true"}, 2, "no bucket"},
		{"invalid bucket", []string{"NODEID_BUCKET=Not_A_Bucket"}, []string{"run", "--", "true"}, 2, "bucket"},
		{"renew interval too long", []string{"NODEID_RENEW_INTERVAL=1s"}, []string{"run", "--", "true"}, 2, "renew interval"},
		{"bad allowed ids", []string{"NODEID_ALLOWED_IDS=0,x"}, []string{"run", "--", "true"}, 2, "NODEID_ALLOWED_IDS"},
		{"allowed id out of range", []string{"NODEID_ALLOWED_IDS=0-5"}, []string{"run", "--", "true"}, 2, "allowed id"},
		{"no command", nil, []string{"run"}, 2, "no command"},
		{"command not found", nil, []string{"run", "--", "no-such-broker-binary"}, 2, "no-such-broker-binary"},
		{"missing data root", []string{"NODEID_DATA_ROOT=" + missingDir}, []string{"run", "--", "true"}, 2, "data root"},
		{"unwritable env file", []string{"NODEID_ENV_FILE=" + filepath.Join(missingDir, "node.env")}, []string{"acquire"}, 2, "env file"},
		{"bad data preset", []string{"NODEID_DATA_PRESET=camunda"}, []string{"run", "--", "true"}, 2, "NODEID_DATA_PRESET"},
		{"bad data preset flag", nil, []string{"acquire", "--data-preset", "Zeebe"}, 2, "--data-preset"},
		{"fs timeout too short", []string{"NODEID_FS_TIMEOUT=100ms"}, []string{"run", "--", "true"}, 2, "NODEID_FS_TIMEOUT"},
		{"bad fs timeout flag", nil, []string{"acquire", "--fs-timeout", "soon"}, 2, "--fs-timeout"},
		{"bad log format", []string{"NODEID_LOG_FORMAT=xml"}, []string{"run", "--", "true"}, 2, "NODEID_LOG_FORMAT"},
		{"bad metrics address", []string{"NODEID_METRICS_ADDR=nonsense"}, []string{"run", "--", "true"}, 2, "NODEID_METRICS_ADDR"},
		// These reach S3: a request timeout (R = 500 ms here) on a loaded
		// machine would be a transient error (exit 1), so they get room.
		{"wrong credentials", append(slowS3, "AWS_SECRET_ACCESS_KEY=wrong"), []string{"run", "--", "true"}, 2, "access denied"},
		{"no such bucket", append(slowS3, "NODEID_BUCKET=no-such-bucket-here"), []string{"run", "--", "true"}, 2, "NoSuchBucket"},
		{"unreachable endpoint", []string{"AWS_ENDPOINT_URL_S3=http://127.0.0.1:1"}, []string{"run", "--", "true"}, 1, "127.0.0.1:1"},
		{"unknown command", nil, []string{"frobnicate"}, 2, "unknown command"},
		{"release without force", nil, []string{"release", "--node", "1"}, 2, "--force"},
		{"health without a lease file", nil, []string{"health"}, 1, "no lease file"},
		{"bad advertise address", []string{"NODEID_ADVERTISE_ADDRESS=10.0.0.1:0"}, []string{"run", "--", "true"}, 2, "NODEID_ADVERTISE_ADDRESS"},
		{"bad advertise address flag", nil, []string{"acquire", "--env-file", filepath.Join(tmplDir, "env"), "--advertise-address", "not a host"}, 2, "--advertise-address"},
		{"unspecified advertise address", nil, []string{"renew", "--handoff-file", "/nonexistent", "--advertise-address", "0.0.0.0:9092"}, 2, "--advertise-address"},
		{"missing template", []string{"NODEID_TEMPLATES=" + filepath.Join(missingDir, "a.tmpl") + ":" + filepath.Join(tmplDir, "a")}, []string{"run", "--", "true"}, 2, "NODEID_TEMPLATES"},
		{"unparsable template", nil, []string{"run", "--template", tmpl("open.tmpl", "{{.Peers"), "--", "true"}, 2, "unclosed action"},
		{"template naming no field", nil, []string{"run", "--template", tmpl("field.tmpl", "{{.NodeId}}"), "--", "true"}, 2, "NodeId"},
		{"template without a destination", []string{"NODEID_TEMPLATES=" + filepath.Join(tmplDir, "x.tmpl")}, []string{"run", "--", "true"}, 2, "SRC:DST"},
		{"template destination directory missing", nil, []string{"run", "--template", okTmpl + ":" + filepath.Join(missingDir, "out"), "--", "true"}, 2, "template destination"},
		{"peers file directory missing", []string{"NODEID_PEERS_FILE=" + filepath.Join(missingDir, "peers.json")}, []string{"run", "--", "true"}, 2, "peers file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(binary, tc.args...)
			cmd.Env = append(append(append([]string{}, c.env...), "NODEID_TASK_ID=bad-input"), tc.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			}
			msg := stderr.String()
			if code != tc.code {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tc.code, msg)
			}
			lines := strings.Split(strings.TrimRight(msg, "\n"), "\n")
			if len(lines) != 1 || !strings.Contains(strings.ToLower(msg), strings.ToLower(tc.want)) {
				t.Errorf("stderr is not one line mentioning %q:\n%s", tc.want, msg)
			}
			if strings.Contains(msg, "goroutine") || strings.Contains(msg, "panic") {
				t.Errorf("stack trace on bad input:\n%s", msg)
			}
		})
	}
	if l, err := c.repo().List(context.Background()); err != nil || len(l.Slots) != 0 {
		t.Errorf("bad input wrote lease objects: %+v %v", l.Slots, err)
	}
	if entries, err := os.ReadDir(c.root); err != nil || len(entries) != 0 {
		t.Errorf("bad input wrote to the data root: %v %v", entries, err)
	}
	if outs, _ := filepath.Glob(filepath.Join(tmplDir, "*.out")); len(outs) != 0 {
		t.Errorf("bad input rendered templates: %v", outs)
	}
}

func TestABrokerIgnoringSigtermIsKilledAfterTheStopTimeout(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 1)
	tk := c.start("stubborn", []string{"NODEID_STOP_TIMEOUT=500ms"}, "run", "--", "sh", "-c",
		`trap '' TERM; echo "$NODE_ID $NODE_VERSION $NODE_PREVIOUS_GRACEFUL" > "$REPORT"; while :; do sleep 0.1; done`)
	tk.identity(t, 20*time.Second)
	start := time.Now()
	if err := tk.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := tk.wait(t, 10*time.Second); code != 128+9 {
		t.Fatalf("exit code %d, want 137 (killed after the stop timeout)", code)
	}
	if took := time.Since(start); took < 500*time.Millisecond {
		t.Errorf("killed after %v, before the stop timeout", took)
	}
	rec, err := c.repo().Get(context.Background(), 0)
	if err != nil || rec.Lease.Held() {
		t.Fatalf("lease not released after the broker was killed: %+v %v", rec.Lease, err)
	}
}

// deadHolderOfV1 initializes the one-node cluster c and leaves node 0 leased
// to a dead task at version 1 (acquirable, expiring in 1 s), with an
// initialized v1 directory under root: the next task takes v2 over
// ungracefully and must prepare it from that v1. It returns v1's path.
func (c *cluster) deadHolderOfV1(t *testing.T, root string) string {
	t.Helper()
	return c.deadHolderOfV1Leasing(t, root, 2*time.Second)
}

// deadHolderOfV1Leasing is deadHolderOfV1 in a cluster initialized with
// lease duration l.
func (c *cluster) deadHolderOfV1Leasing(t *testing.T, root string, l time.Duration) string {
	t.Helper()
	repo := c.repo()
	ctx := context.Background()
	if err := nodeid.Initialize(ctx, repo, 1, "setup", l); err != nil {
		t.Fatal(err)
	}
	rec, _ := repo.Get(ctx, 0)
	dead := nodeid.Lease{TaskID: "dead", Instance: nodeid.NodeInstance{ID: 0, Version: 1}, Duration: time.Second, Nonce: "n", Acquirable: true}
	if _, err := repo.Write(ctx, dead, rec.ETag); err != nil {
		t.Fatal(err)
	}
	v1 := filepath.Join(root, "node-0", "v1")
	if err := os.MkdirAll(v1, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(v1, "directory-initialized.json"), []byte(`{"initializedAt":"2026-11-30T00:00:00Z","version":1,"initializedFrom":null}`), 0o640); err != nil {
		t.Fatal(err)
	}
	return v1
}

// A data directory that cannot be prepared after an ungraceful takeover must
// not be vouched for: the lease is left to expire, not released, so the
// successor copies instead of hard-linking a stale holder's files.
func TestFailedPreparationAfterATakeoverLeavesTheLeaseToExpire(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 1)
	repo := c.repo()
	ctx := context.Background()
	// The dead holder's v1 holds a link out of the data directory: the task
	// that takes v2 cannot prepare it.
	v1 := c.deadHolderOfV1(t, c.root)
	if err := os.Symlink("/etc/passwd", filepath.Join(v1, "evil")); err != nil {
		t.Fatal(err)
	}
	tk := c.runTask("unlucky")
	if code := tk.wait(t, 20*time.Second); code != 1 {
		t.Fatalf("exit code %d, want 1 (prepare failed):\n%s", code, tk.out.String())
	}
	got, err := repo.Get(ctx, 0)
	if err != nil || !got.Lease.Held() || got.Lease.TaskID != "unlucky" || got.Lease.Instance.Version != 2 {
		t.Fatalf("lease after a failed preparation: %+v %v; want it still held by unlucky v2, to expire", got.Lease, err)
	}
	if !strings.Contains(tk.out.String(), "symlink leaves the data directory") {
		t.Errorf("no reason given:\n%s", tk.out.String())
	}
}

// A valid directory above the version acquired means the lease went
// backwards. The task refuses with exit 6, changes nothing, and leaves the
// lease to expire even though its predecessor released it: a release would
// let the successor hard-link files whose writer is unknown.
func TestDataRootWithANewerVersionIsRefusedAndTheLeaseLeftToExpire(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 1)
	repo := c.repo()
	ctx := context.Background()
	if err := nodeid.Initialize(ctx, repo, 1, "setup", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	v5 := filepath.Join(c.root, "node-0", "v5")
	if err := os.MkdirAll(v5, 0o750); err != nil {
		t.Fatal(err)
	}
	marker := `{"initializedAt":1764547200123,"version":5,"initializedFrom":null}` // Camunda's form
	if err := os.WriteFile(filepath.Join(v5, "directory-initialized.json"), []byte(marker), 0o640); err != nil {
		t.Fatal(err)
	}
	tk := c.runTask("behind")
	if code := tk.wait(t, 20*time.Second); code != 6 {
		t.Fatalf("exit code %d, want 6 (data root refused):\n%s", code, tk.out.String())
	}
	got, err := repo.Get(ctx, 0)
	if err != nil || !got.Lease.Held() || got.Lease.TaskID != "behind" || got.Lease.Instance.Version != 1 {
		t.Fatalf("lease after the refusal: %+v %v; want it still held by behind v1, to expire", got.Lease, err)
	}
	out := tk.out.String()
	for _, want := range []string{"nodeid-init run: prepare data directory: datadir: a newer version is already initialized: " + v5, "went backwards", "left to expire"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(c.root, "node-0"))
	if len(entries) != 1 {
		t.Errorf("node-0 holds %v, want only v5", entries)
	}
	if _, err := os.Stat(filepath.Join(c.root, "nodeid-cluster.json")); err == nil {
		t.Error("the refusal claimed the data root")
	}
}

// A data root as Camunda 8.9 leaves it is adopted, and with --data-preset
// zeebe the new version carries everything but runtime/.
func TestCamundaDataRootWithTheZeebePreset(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 1)
	if err := nodeid.Initialize(context.Background(), c.repo(), 1, "setup", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	v0 := filepath.Join(c.root, "node-0", "v0")
	for rel, content := range map[string]string{
		"directory-initialized.json":    `{"initializedAt":1764547200123,"version":0,"initializedFrom":null}`,
		"snapshots/1-1-5-4/000042.sst":  "snapshot",
		"runtime/000050.sst":            "runtime",
		"raft-partition/partitions/1/j": "journal",
	} {
		p := filepath.Join(v0, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	tk := c.start("zeebe", []string{"NODEID_DATA_PRESET=zeebe"}, "acquire", "--env-file", filepath.Join(t.TempDir(), "node.env"))
	if code := tk.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("exit code %d:\n%s", code, tk.out.String())
	}
	v1 := filepath.Join(c.root, "node-0", "v1")
	for rel, want := range map[string]bool{"snapshots/1-1-5-4/000042.sst": true, "raft-partition/partitions/1/j": true, "runtime": false} {
		if _, err := os.Lstat(filepath.Join(v1, rel)); (err == nil) != want {
			t.Errorf("v1/%s present = %v, want %v", rel, err == nil, want)
		}
	}
	if _, err := os.Stat(filepath.Join(v0, "runtime/000050.sst")); err != nil {
		t.Errorf("Camunda's v0 was changed: %v", err)
	}
}
