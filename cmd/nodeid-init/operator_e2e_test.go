package main_test

// End-to-end tests of issue 13, "Operator experience": real nodeid-init
// processes against VersityGW (flags, help, exit codes, status --check and
// --watch, health as the README sets it up, the admin commands' guards and
// their success paths).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/faultproxy"
	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// runCmd runs nodeid-init to its end with the cluster's environment plus
// env, and returns its exit code, stdout and stderr.
func (c *cluster) runCmd(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(append([]string{}, c.env...), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("nodeid-init %v still running after 60s:\n%s%s", args, stdout.String(), stderr.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	}
	return code, stdout.String(), stderr.String()
}

func oneLineWith(t *testing.T, what, out, want string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 1 || !strings.Contains(out, want) {
		t.Errorf("%s: want one line containing %q, got:\n%s", what, want, out)
	}
	if strings.Contains(out, "goroutine ") || strings.Contains(out, "panic") {
		t.Errorf("%s: stack trace:\n%s", what, out)
	}
}

func TestBareBooleanFlagsAndHelp(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 1)
	env := []string{"NODEID_S3_PATH_STYLE=", "NODEID_TASK_ID=flags", "TMPDIR=" + t.TempDir()}
	// Bare booleans, as with Go's flag package; the next flag is not taken
	// as a value.
	code, _, stderr := c.runCmd(t, env, "run", "--s3-path-style", "--skip-probe", "--", "true")
	if code != 0 || !strings.Contains(stderr, "probe skipped") {
		t.Fatalf("run --s3-path-style --skip-probe -- true: exit %d:\n%s", code, stderr)
	}
	code, _, stderr = c.runCmd(t, env, "run", "--s3-path-style", "--skip-probe=false", "--", "true")
	if code != 0 || strings.Contains(stderr, "probe skipped") {
		t.Fatalf("--skip-probe=false: exit %d:\n%s", code, stderr)
	}
	code, _, stderr = c.runCmd(t, env, "run", "--skip-probe=maybe", "--", "true")
	if code != 2 {
		t.Fatalf("--skip-probe=maybe: exit %d:\n%s", code, stderr)
	}
	oneLineWith(t, "--skip-probe=maybe", stderr, "not a boolean")

	// Help: on stdout, exit 0; per command; booleans listed as such.
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		code, stdout, stderr := c.runCmd(t, nil, args...)
		if code != 0 || stderr != "" || !strings.Contains(stdout, "usage: nodeid-init COMMAND") {
			t.Errorf("%v: exit %d, stdout:\n%s\nstderr:\n%s", args, code, stdout, stderr)
		}
	}
	for _, args := range [][]string{{"help", "run"}, {"run", "-h"}, {"run", "--help"}} {
		code, stdout, stderr := c.runCmd(t, nil, args...)
		if code != 0 || stderr != "" || !strings.Contains(stdout, "usage: nodeid-init run [flags] -- CMD") {
			t.Errorf("%v: exit %d, stdout:\n%s\nstderr:\n%s", args, code, stdout, stderr)
		}
		for _, line := range strings.Split(stdout, "\n") {
			if strings.Contains(line, "-skip-probe") && strings.Contains(line, "string") {
				t.Errorf("%v lists --skip-probe as a string: %q", args, line)
			}
		}
	}
	if code, _, stderr := c.runCmd(t, nil); code != 2 || !strings.Contains(stderr, "usage:") {
		t.Errorf("no arguments: exit %d, stderr:\n%s", code, stderr)
	}
	for _, args := range [][]string{{"--version"}, {"version"}, {"-version"}} {
		code, stdout, _ := c.runCmd(t, nil, args...)
		if code != 0 || !strings.HasPrefix(stdout, "nodeid-init ") {
			t.Errorf("%v: exit %d, %q", args, code, stdout)
		}
	}
}

func TestOperatorBadInputExitsTwoWithOneLine(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 2)
	tmp := t.TempDir()
	cases := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"endpoint without a scheme", nil, []string{"run", "--endpoint", "127.0.0.1:7070", "--", "true"}, "http:// or https://"},
		{"endpoint variable without a scheme", []string{"AWS_ENDPOINT_URL_S3=127.0.0.1:7070"}, []string{"status"}, "AWS_ENDPOINT_URL_S3"},
		{"lease duration 1ms", nil, []string{"run", "--lease-duration", "1ms", "--", "true"}, "at least 1s"},
		{"lease duration 300ms", nil, []string{"run", "--lease-duration", "300ms", "--", "true"}, "resolution of 1s"},
		{"lease duration of days", nil, []string{"status", "--lease-duration", "72h"}, "at most 1h"},
		{"renew interval 10ms", nil, []string{"run", "--renew-interval", "10ms", "--", "true"}, "at least 100ms"},
		{"poll interval 1ms", nil, []string{"acquire", "--env-file", filepath.Join(tmp, "env"), "--poll-interval", "1ms"}, "at least 100ms"},
		{"a million node IDs", nil, []string{"run", "--cluster-size", "1000000", "--", "true"}, "1..1024"},
		{"release of a negative node", nil, []string{"release", "--node", "-3", "--force"}, "invalid --node"},
		{"release of a non-number", nil, []string{"release", "--node", "two", "--force"}, "invalid --node"},
		{"scale size from the environment only", nil, []string{"scale"}, "--cluster-size N on the command line"},
		{"bootstrap size from the environment only", nil, []string{"bootstrap"}, "--cluster-size N on the command line"},
		{"watch and check together", nil, []string{"status", "--watch", "--check"}, "exclude"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := c.runCmd(t, append([]string{"TMPDIR=" + tmp}, tc.env...), tc.args...)
			if code != 2 {
				t.Errorf("exit %d, want 2:\n%s", code, stderr)
			}
			oneLineWith(t, tc.name, stderr, tc.want)
		})
	}
	if l, err := c.repo().List(context.Background()); err != nil || len(l.Slots) != 0 {
		t.Errorf("bad input wrote lease objects: %+v %v", l.Slots, err)
	}
	if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
		t.Errorf("bad input wrote to $TMPDIR: %v", entries)
	}
}

// Without credentials: exit 2 (as documented), and with --log-format json
// every line is JSON, the SDK's own IMDS warning included.
func TestMissingCredentialsExitTwoAndEveryLineIsJSON(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 1)
	// A metadata service that refuses IMDSv2 tokens (403) and has no role:
	// the SDK warns "falling back to IMDSv1", then finds no credentials.
	imds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		http.NotFound(w, r)
	}))
	defer imds.Close()
	env := []string{"AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=", "AWS_EC2_METADATA_SERVICE_ENDPOINT=" + imds.URL,
		"NODEID_LOG_FORMAT=json", "TMPDIR=" + t.TempDir()}
	for _, args := range [][]string{{"status"}, {"run", "--", "true"}} {
		code, _, stderr := c.runCmd(t, env, args...)
		if code != 2 {
			t.Errorf("%v without credentials: exit %d, want 2:\n%s", args, code, stderr)
		}
		if !strings.Contains(stderr, "no usable AWS credentials") {
			t.Errorf("%v: no clear error:\n%s", args, stderr)
		}
		sawSDK := false
		for _, line := range strings.Split(strings.TrimRight(stderr, "\n"), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Errorf("%v: a line that is not JSON: %q", args, line)
				continue
			}
			if rec["component"] == "aws-sdk" {
				sawSDK = true
			}
		}
		if !sawSDK {
			t.Errorf("%v: the SDK's IMDS warning is not in the log as JSON:\n%s", args, stderr)
		}
	}
}

func TestStatusCheckNamesTheRowsAndWatchSurvivesErrors(t *testing.T) {
	srv := s3test.StartVersity(t)
	c := newCluster(t, srv, 3)
	if code, out, errOut := c.runCmd(t, nil, "bootstrap", "--cluster-size", "3"); code != 0 {
		t.Fatalf("bootstrap: %d\n%s%s", code, out, errOut)
	}
	// Nothing held: every ID is released, fewer than 3 held.
	code, stdout, stderr := c.runCmd(t, nil, "status", "--check")
	if code != 1 || !strings.Contains(stderr, "0 of 3 node IDs held") {
		t.Fatalf("status --check of an idle cluster: exit %d\n%s%s", code, stdout, stderr)
	}
	tmp := t.TempDir()
	for _, name := range []string{"a", "b", "c"} {
		c.runTask(name, "TMPDIR="+tmp).identity(t, 20*time.Second)
	}
	code, stdout, stderr = c.runCmd(t, nil, "status", "--check")
	if code != 0 || !strings.Contains(stdout, "check ok: 3 of 3") {
		t.Fatalf("status --check of a full cluster: exit %d\n%s%s", code, stdout, stderr)
	}
	// A corrupt object and a missing ID are named.
	putObject(t, srv, "e2e/4.json", "garbage", map[string]string{"version": "1"})
	code, stdout, stderr = c.runCmd(t, nil, "status", "--check", "--cluster-size", "4")
	if code != 1 || !strings.Contains(stderr, "node 3 missing") || !strings.Contains(stderr, "node 4 corrupt") || !strings.Contains(stderr, "3 of 4 node IDs held") {
		t.Fatalf("status --check: exit %d\n%s%s", code, stdout, stderr)
	}
	// The table: rows by ID (missing 3 before corrupt 4), the corrupt
	// error not cut inside a word.
	var rows []string
	for _, line := range strings.Split(stdout, "\n")[1:] {
		if f := strings.Fields(line); len(f) > 1 {
			rows = append(rows, f[0]+" "+f[1])
		}
	}
	if strings.Join(rows, ",") != "0 held,1 held,2 held,3 missing,4 corrupt" {
		t.Errorf("rows %v:\n%s", rows, stdout)
	}

	// --watch to a pipe: no screen-clear codes; a failed refresh is shown
	// and the watch goes on until interrupted.
	cmd := exec.Command(binary, "status", "--watch")
	cmd.Env = append(append([]string{}, c.env...), "AWS_ENDPOINT_URL_S3=http://127.0.0.1:1")
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "two failed refreshes", func() bool { return strings.Count(out.String(), "refresh failed") >= 2 })
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatalf("status --watch exited on its own: %v\n%s", err, out.String())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("status --watch: %v\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "\033[") {
		t.Errorf("screen-clear codes written to a pipe:\n%q", out.String())
	}
	if n := strings.Count(out.String(), "refresh failed"); n < 2 {
		t.Errorf("want at least two failed refreshes shown, got %d:\n%s", n, out.String())
	}
}

// The README's ECS setup: `nodeid-init run` without NODEID_LEASE_FILE, and
// `nodeid-init health` as the container's health check in the same
// container (same TMPDIR, no lease-file setting).
func TestHealthWithTheReadmeSetup(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 1)
	holderTmp, spareTmp := t.TempDir(), t.TempDir()
	health := func(tmp string, env ...string) (int, string) {
		code, stdout, stderr := c.runCmd(t, append([]string{"TMPDIR=" + tmp, "NODEID_LEASE_FILE="}, env...), "health")
		return code, stdout + stderr
	}
	if code, out := health(holderTmp); code == 0 {
		t.Fatalf("health before any run: exit 0:\n%s", out)
	}
	holder := c.runTask("holder", "TMPDIR="+holderTmp)
	holder.identity(t, 20*time.Second)
	if code, out := health(holderTmp); code != 0 || !strings.Contains(out, "node 0 v1 held by holder") {
		t.Fatalf("health of the holder: exit %d:\n%s", code, out)
	}
	// NODE_LEASE_FILE (the broker's variable) is honoured too.
	if code, out := health(t.TempDir(), "NODE_LEASE_FILE="+filepath.Join(holderTmp, "nodeid-"+uid(), "lease.json")); code != 0 {
		t.Fatalf("health with NODE_LEASE_FILE: exit %d:\n%s", code, out)
	}
	// A hot spare in its own container is healthy while it waits, unless
	// --held is asked for.
	c.runTask("spare", "TMPDIR="+spareTmp)
	waitFor(t, 10*time.Second, "the spare's lease file", func() bool {
		code, out := health(spareTmp)
		return code == 0 && strings.Contains(out, "waiting for a node ID")
	})
	if code, _, _ := c.runCmd(t, []string{"TMPDIR=" + spareTmp}, "health", "--held"); code != 1 {
		t.Errorf("health --held of a waiting spare: exit %d, want 1", code)
	}
	// The holder stops: its health fails, the spare takes over and is
	// healthy as a holder.
	if err := holder.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	holder.wait(t, 10*time.Second)
	if code, out := health(holderTmp); code != 1 || !strings.Contains(out, "released") {
		t.Errorf("health after the release: exit %d:\n%s", code, out)
	}
	waitFor(t, 10*time.Second, "the spare to hold node 0", func() bool {
		code, out := health(spareTmp)
		return code == 0 && strings.Contains(out, "held by spare")
	})
	// One lease file per user, not one per process.
	entries, _ := os.ReadDir(holderTmp)
	if len(entries) != 1 || entries[0].Name() != "nodeid-"+uid() {
		t.Errorf("$TMPDIR of the holder: %v, want only nodeid-%s", entries, uid())
	}
}

func uid() string { return strconv.Itoa(os.Getuid()) }

func itoa(n int) string { return strconv.Itoa(n) }

func TestAdminCommandsGuardsAndSuccessPaths(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 2)
	ctx := context.Background()
	tmp := t.TempDir()
	c.env = append(c.env, "TMPDIR="+tmp)

	// probe: success.
	if code, stdout, stderr := c.runCmd(t, nil, "probe"); code != 0 || !strings.Contains(stdout, "conditional writes are enforced") {
		t.Fatalf("probe: exit %d\n%s%s", code, stdout, stderr)
	}
	// bootstrap: a dry run changes nothing; a large one wants --yes.
	if code, stdout, _ := c.runCmd(t, nil, "bootstrap", "--cluster-size", "2", "--dry-run"); code != 0 || !strings.Contains(stdout, "would create 2 lease objects") {
		t.Fatalf("bootstrap --dry-run: exit %d\n%s", code, stdout)
	}
	if code, _, stderr := c.runCmd(t, nil, "bootstrap", "--cluster-size", "100"); code != 2 || !strings.Contains(stderr, "--yes") {
		t.Fatalf("bootstrap of 100 without --yes: exit %d\n%s", code, stderr)
	}
	if l, _ := c.repo().List(ctx); len(l.Slots) != 0 {
		t.Fatalf("dry run or refused bootstrap wrote objects: %+v", l.Slots)
	}
	if code, stdout, stderr := c.runCmd(t, nil, "bootstrap", "--cluster-size", "2"); code != 0 || !strings.Contains(stdout, "cluster of 2 node IDs ready") {
		t.Fatalf("bootstrap: exit %d\n%s%s", code, stdout, stderr)
	}
	if l, _ := c.repo().List(ctx); len(l.Slots) != 2 || !l.MarkerSeen {
		t.Fatalf("after bootstrap: %+v", l)
	}

	a := c.runTask("a")
	idA, _, _ := a.identity(t, 20*time.Second)
	b := c.runTask("b")
	idB, _, _ := b.identity(t, 20*time.Second)

	// scale up: a dry run changes nothing; then a task that still has the
	// old size is told what to do, and one with the new size takes the new
	// ID once its scale-created lease expires.
	if code, stdout, _ := c.runCmd(t, nil, "scale", "--cluster-size", "3", "--dry-run"); code != 0 || !strings.Contains(stdout, "node 2: would create") {
		t.Fatalf("scale --dry-run: exit %d\n%s", code, stdout)
	}
	if _, err := c.repo().Get(ctx, 2); !errors.Is(err, nodeid.ErrNotFound) {
		t.Fatalf("scale --dry-run created node 2: %v", err)
	}
	code, stdout, stderr := c.runCmd(t, nil, "scale", "--cluster-size", "3")
	if code != 0 || !strings.Contains(stdout, "set NODEID_CLUSTER_SIZE=3") {
		t.Fatalf("scale up: exit %d\n%s%s", code, stdout, stderr)
	}
	_, stdout, _ = c.runCmd(t, nil, "status")
	if !strings.Contains(stdout, "takeable when it expires") {
		t.Errorf("status does not say why node 2 is not takeable yet:\n%s", stdout)
	}
	old := c.runTask("old-size")
	waitFor(t, 15*time.Second, "the scale-up hint", func() bool {
		return strings.Contains(old.out.String(), "set NODEID_CLUSTER_SIZE=3")
	})
	old.cmd.Process.Kill()
	newer := c.runTask("new-size", "NODEID_CLUSTER_SIZE=3")
	if id, v, _ := newer.identity(t, 20*time.Second); id != 2 || v < 1 {
		t.Fatalf("new-size got node %d v%d, want node 2", id, v)
	}

	// scale down would fence a live holder: refused without --yes.
	code, _, stderr = c.runCmd(t, nil, "scale", "--cluster-size", "2")
	if code != 2 || !strings.Contains(stderr, "fence the live holders of node 2") {
		t.Fatalf("scale down over a live holder: exit %d\n%s", code, stderr)
	}
	if !newer.running() {
		t.Fatal("the refused scale-down fenced the holder")
	}
	if code, stdout, stderr := c.runCmd(t, nil, "scale", "--cluster-size", "2", "--yes"); code != 0 || !strings.Contains(stdout, "FENCES") {
		t.Fatalf("scale down --yes: exit %d\n%s%s", code, stdout, stderr)
	}
	if code := newer.wait(t, 15*time.Second); code != 3 {
		t.Fatalf("the holder of the removed ID exited %d, want 3", code)
	}
	// release of the unusable node does not promise a next holder. It was
	// marked just now, so its holder may still be valid: --yes.
	if code, stdout, stderr := c.runCmd(t, nil, "release", "--node", "2", "--force", "--yes"); code != 0 || !strings.Contains(stdout, "unusable") || strings.Contains(stdout, "next holder") {
		t.Fatalf("release of an unusable node: exit %d\n%s%s", code, stdout, stderr)
	}

	// release --force of a live holder: refused without --yes; a dry run
	// changes nothing.
	code, _, stderr = c.runCmd(t, nil, "release", "--node", itoa(idA), "--force")
	if code != 2 || !strings.Contains(stderr, "looks alive") {
		t.Fatalf("release --force of a live holder: exit %d\n%s", code, stderr)
	}
	before, _ := c.repo().Get(ctx, idA)
	if code, stdout, _ := c.runCmd(t, nil, "release", "--node", itoa(idA), "--force", "--dry-run"); code != 0 || !strings.Contains(stdout, "dry run") {
		t.Fatalf("release --dry-run: exit %d\n%s", code, stdout)
	}
	// Compared by holder and version, not ETag: every renewal writes a new
	// nonce, so a renewal in between changes the ETag.
	if after, _ := c.repo().Get(ctx, idA); after.Lease.TaskID != before.Lease.TaskID || after.Lease.Instance != before.Lease.Instance ||
		!after.Lease.Acquirable || !a.running() {
		t.Fatalf("release --dry-run changed the object: before %+v, after %+v (holder running: %v)", before.Lease, after.Lease, a.running())
	}
	// The holder dies (kill -9): release --force hands the ID over at once,
	// and the successor copies (graceful=false).
	a.cmd.Process.Kill()
	a.wait(t, 10*time.Second)
	code, stdout, stderr = c.runCmd(t, nil, "release", "--node", itoa(idA), "--force", "--yes")
	if code != 0 || !strings.Contains(stdout, "released at version 1; the next holder gets version 2") {
		t.Fatalf("release --force --yes: exit %d\n%s%s", code, stdout, stderr)
	}
	if rec, err := c.repo().Get(ctx, idA); err != nil || rec.Lease.Held() || !rec.Lease.Forced || rec.Lease.Instance.Version != 1 {
		t.Fatalf("after release --force: %+v %v, want a forced release at v1", rec.Lease, err)
	}
	succ := c.runTask("successor")
	id, v, graceful := succ.identity(t, 20*time.Second)
	if id != idA || v != 2 || graceful {
		t.Fatalf("successor got node %d v%d graceful=%t, want node %d v2 graceful=false", id, v, graceful, idA)
	}
	_ = idB
}

// jsonLines parses every line of out as a JSON record; a line that is not
// JSON fails the test.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("not a JSON line: %q", line)
			continue
		}
		recs = append(recs, rec)
	}
	return recs
}

// The log an operator reads: JSON only, durations as numbers of seconds, a line when
// renewals recover, a failed command at WARN, the loss once, and no SDK
// request IDs.
func TestOperatorLogs(t *testing.T) {
	srv := s3test.NewFake(t)
	proxy := startProxy(t, srv.URL)
	c := newCluster(t, srv, 2)
	c.env = append(c.env, "AWS_ENDPOINT_URL_S3="+proxy.URL, "NODEID_LOG_FORMAT=json", "TMPDIR="+t.TempDir())

	failing := c.start("failing", []string{"NODEID_ALLOWED_IDS=1"}, "run", "--", "sh", "-c", "exit 7")
	if code := failing.wait(t, 20*time.Second); code != 7 {
		t.Fatalf("exit %d, want the command's 7:\n%s", code, failing.out.String())
	}
	warned := false
	for _, rec := range jsonLines(t, failing.out.String()) {
		if strings.HasPrefix(rec["msg"].(string), "command exited") && rec["level"] == "WARN" {
			warned = true
		}
		if rec["msg"] == "acquired node id" {
			if _, ok := rec["took_seconds"].(float64); !ok {
				t.Errorf("took_seconds is not a number: %v", rec)
			}
		}
	}
	if !warned {
		t.Errorf("a command that exited 7 is not logged at WARN:\n%s", failing.out.String())
	}

	holder := c.runTask("holder", "NODEID_ALLOWED_IDS=0")
	id, v, _ := holder.identity(t, 20*time.Second)
	// Renewals fail for a moment (well within the deadline), then recover.
	proxy.Set(faultproxy.Fault{Methods: []string{"PUT"}, Status: 500})
	waitFor(t, 5*time.Second, "a failed renewal", func() bool { return strings.Contains(holder.out.String(), "renewal failed") })
	proxy.Set(faultproxy.Fault{})
	waitFor(t, 5*time.Second, "renewals recovered", func() bool { return strings.Contains(holder.out.String(), `"msg":"renewals recovered"`) })

	// The lease is overwritten: exit 3, the loss logged once, no final
	// line repeating it, no request IDs.
	body := `{"taskId":"intruder","timestamp":` + strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10) +
		`,"nodeInstance":{"id":` + itoa(id) + `,"version":` + itoa(v) + `},"knownVersionMappings":{"mappingsByNodeId":{}}}`
	putObject(t, srv, "e2e/"+nodeid.LeaseKey("", id), body, map[string]string{"taskid": "intruder", "version": itoa(v), "acquirable": "true"})
	if code := holder.wait(t, 10*time.Second); code != 3 {
		t.Fatalf("exit %d after an overwrite, want 3:\n%s", code, holder.out.String())
	}
	recs := jsonLines(t, holder.out.String())
	losses := 0
	for _, rec := range recs {
		if rec["msg"] == "lease lost" {
			losses++
		}
		if strings.HasPrefix(rec["msg"].(string), "nodeid-init run:") {
			t.Errorf("the loss is repeated as a final line: %v", rec)
		}
	}
	if losses != 1 {
		t.Errorf("%d \"lease lost\" records, want 1:\n%s", losses, holder.out.String())
	}
	if strings.Contains(holder.out.String(), "RequestID") {
		t.Errorf("SDK request IDs in the log:\n%s", holder.out.String())
	}
}
