package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nodeid/nodeid/internal/faultproxy"
	"github.com/nodeid/nodeid/internal/poll"
	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// The lease timing of every task: short, so a crash heals in seconds, with
// the production ratios (R = L/4, m = L/5 by default).
const (
	clusterSize = 3
	prefix      = "e2e/"
	leaseL      = 4 * time.Second
	renewR      = time.Second
	pollP       = 250 * time.Millisecond
	marginM     = leaseL / 5
)

// world is one cluster of tasks: a bucket on VersityGW, a shared data root
// (the "EFS"), and the tasks, each `nodeid-init run -- sh RECIPE` behind
// its own fault proxy, as ECS would run them.
type world struct {
	top    *testing.T // the test that owns the world: its cleanup
	t      *testing.T // the (sub)test running now
	srv    *s3test.Server
	repo   *nodeid.S3Repository
	s3     *s3.Client
	id     string // marks this world's processes in /proc (E2E_WORLD)
	dir    string
	root   string // the data root: node-N/vK below it
	script string // the recipe, from docs/recipes
	exe    string // base name of the member's program in /proc: etcd, java
	env    func(tk *task) []string

	mu    sync.Mutex
	seq   int
	tasks []*task
}

func newWorld(t *testing.T, recipe, exe string, env func(tk *task) []string) *world {
	srv := s3test.StartVersity(t)
	w := &world{top: t, t: t, srv: srv, s3: srv.Client(t), dir: t.TempDir(), exe: exe, env: env,
		id: fmt.Sprintf("%s-%d", filepath.Base(recipe), time.Now().UnixNano())}
	w.root = filepath.Join(w.dir, "data")
	if err := os.Mkdir(w.root, 0o755); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs(filepath.Join("..", "docs", "recipes", recipe))
	if err != nil {
		t.Fatal(err)
	}
	w.script = script
	client, err := nodeid.NewS3Client(context.Background(), nodeid.S3Config{Endpoint: srv.URL, Region: srv.Region,
		PathStyle: true, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	if w.repo, err = nodeid.NewS3Repository(client, srv.Bucket, prefix, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.stopAll)
	return w
}

// task is one `nodeid-init run` process.
type task struct {
	name    string
	dir     string // the task's own disk: lease file, log, rendered configuration
	logPath string
	proxy   *faultproxy.Proxy
	cmd     *exec.Cmd
	done    chan struct{}
	code    int
	exitAt  time.Time
}

// start starts the next task; it waits for a free node ID like an ECS
// task of the service would.
func (w *world) start() *task {
	w.t.Helper()
	w.mu.Lock()
	w.seq++
	name := fmt.Sprintf("task-%d", w.seq)
	w.mu.Unlock()
	p, err := faultproxy.Start(w.srv.URL)
	if err != nil {
		w.t.Fatal(err)
	}
	tk := &task{name: name, dir: filepath.Join(w.dir, "tasks", name), proxy: p, done: make(chan struct{})}
	if err := os.MkdirAll(tk.dir, 0o755); err != nil {
		w.t.Fatal(err)
	}
	tk.logPath = filepath.Join(tk.dir, "log")
	out, err := os.Create(tk.logPath)
	if err != nil {
		w.t.Fatal(err)
	}
	tk.cmd = exec.Command(nodeidInit, "run", "--", "sh", w.script)
	tk.cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + tk.dir, "TMPDIR=" + tk.dir,
		"AWS_ACCESS_KEY_ID=" + w.srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + w.srv.SecretKey,
		"AWS_REGION=" + w.srv.Region, "AWS_ENDPOINT_URL_S3=" + p.URL,
		"AWS_CONFIG_FILE=/nonexistent", "AWS_SHARED_CREDENTIALS_FILE=/nonexistent", "AWS_EC2_METADATA_DISABLED=true",
		"NODEID_BUCKET=" + w.srv.Bucket, "NODEID_PREFIX=" + prefix, "NODEID_S3_PATH_STYLE=true",
		fmt.Sprintf("NODEID_CLUSTER_SIZE=%d", clusterSize),
		"NODEID_LEASE_DURATION=" + leaseL.String(), "NODEID_RENEW_INTERVAL=" + renewR.String(),
		"NODEID_POLL_INTERVAL=" + pollP.String(), "NODEID_STOP_TIMEOUT=20s",
		"NODEID_TASK_ID=" + name, "NODEID_DATA_ROOT=" + w.root,
		"NODEID_LEASE_FILE=" + filepath.Join(tk.dir, "lease.json"),
		"NODEID_LOG_FORMAT=json", "NODEID_ADVERTISE_ADDRESS=127.0.0.1",
		"E2E_WORLD=" + w.id,
	}, w.env(tk)...)
	tk.cmd.Stdout, tk.cmd.Stderr = out, out
	// Its own process group, so a signal to the test does not reach it;
	// Pdeathsig, so it dies with the test binary.
	tk.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := tk.cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	go func() {
		err := tk.cmd.Wait()
		tk.exitAt = time.Now()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			tk.code = ee.ExitCode()
		}
		out.Close()
		p.Close()
		close(tk.done)
	}()
	w.mu.Lock()
	w.tasks = append(w.tasks, tk)
	w.mu.Unlock()
	return tk
}

// spare starts a task and waits until it waits for a free ID: every ID
// is held.
func (w *world) spare() *task {
	w.t.Helper()
	tk := w.start()
	w.waitFor(30*time.Second, tk.name+" waiting as a spare", func() bool { return len(tk.lines("no node id free, waiting")) > 0 })
	return tk
}

// stopAll stops every task as ECS stops a service (SIGTERM, then SIGKILL),
// and shows the logs of the tasks when the test failed.
func (w *world) stopAll() {
	w.mu.Lock()
	tasks := append([]*task(nil), w.tasks...)
	w.mu.Unlock()
	for _, tk := range tasks {
		_ = tk.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, tk := range tasks {
		select {
		case <-tk.done:
		case <-time.After(25 * time.Second):
			_ = tk.cmd.Process.Kill()
			<-tk.done
		}
	}
	// A member that outlived its task would run unsupervised: kill it, and
	// say so.
	for id, pids := range w.members() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			w.top.Errorf("member %d (pid %d) outlived every task", id, pid)
		}
	}
	if w.top.Failed() {
		for _, tk := range tasks {
			w.top.Logf("--- %s (exit %d), last lines of its log:\n%s", tk.name, tk.code, tail(tk.logPath, 30))
		}
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

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// logLine is a supervisor log line (NODEID_LOG_FORMAT=json).
type logLine struct {
	Time        time.Time `json:"time"`
	Msg         string    `json:"msg"`
	NodeID      *int      `json:"node_id"`
	Version     int64     `json:"version"`
	Graceful    *bool     `json:"previous_graceful"`
	FromVersion *int64    `json:"from_version"` // absent when it started empty
	FilesCopied int64     `json:"files_copied"`
	FilesLinked int64     `json:"files_linked"`
	BytesCopied int64     `json:"bytes_copied"`
}

// lines returns the supervisor's log lines with the given msg.
func (tk *task) lines(msg string) []logLine {
	f, err := os.Open(tk.logPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []logLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		b := sc.Bytes()
		if !bytes.HasPrefix(b, []byte("{")) || !bytes.Contains(b, []byte(`"msg":"`+msg+`"`)) {
			continue
		}
		var l logLine
		if json.Unmarshal(b, &l) == nil && l.Msg == msg {
			out = append(out, l)
		}
	}
	return out
}

// tenure is what a task says about the node ID it took.
type tenure struct {
	id       int
	version  int64
	graceful bool
	acquired time.Time // the supervisor's clock: the test's host
	prepared logLine
}

// tenure returns the task's tenure once its member was started.
func (tk *task) tenure() (tenure, bool) {
	acq, prep, started := tk.lines("acquired node id"), tk.lines("prepared"), tk.lines("command started")
	if len(acq) == 0 || len(prep) == 0 || len(started) == 0 || acq[0].NodeID == nil || acq[0].Graceful == nil {
		return tenure{}, false
	}
	return tenure{id: *acq[0].NodeID, version: acq[0].Version, graceful: *acq[0].Graceful, acquired: acq[0].Time, prepared: prep[0]}, true
}

func (w *world) waitFor(timeout time.Duration, what string, cond func() bool) {
	w.t.Helper()
	if err := poll.Until(w.t.Context(), timeout, 50*time.Millisecond, what, cond); err != nil {
		w.t.Fatal(err)
	}
}

// holder returns the running task whose member runs as node id.
func (w *world) holder(id int) *task {
	w.t.Helper()
	var found *task
	w.waitFor(30*time.Second, fmt.Sprintf("a running task with node %d", id), func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, tk := range w.tasks {
			if te, ok := tk.tenure(); ok && te.id == id && tk.running() {
				found = tk
				return true
			}
		}
		return false
	})
	return found
}

// takeover waits until a task other than old runs node id with a version
// above v, and returns it with its tenure.
func (w *world) takeover(old *task, id int, v int64, timeout time.Duration) (*task, tenure) {
	w.t.Helper()
	var found *task
	var te tenure
	w.waitFor(timeout, fmt.Sprintf("a successor of %s on node %d above version %d", old.name, id, v), func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, tk := range w.tasks {
			if tk == old {
				continue
			}
			if got, ok := tk.tenure(); ok && got.id == id && got.version > v {
				found, te = tk, got
				return true
			}
		}
		return false
	})
	return found, te
}

// overwrite writes node id's lease object from outside, unconditionally,
// as another holder of the same version would (chaos/lease_faults.go).
func (w *world) overwrite(id int, v int64) {
	w.t.Helper()
	body := fmt.Sprintf(`{"taskId":"intruder","timestamp":%d,"nodeInstance":{"id":%d,"version":%d},"knownVersionMappings":{"mappingsByNodeId":{}}}`,
		time.Now().UnixMilli(), id, v)
	ctx, cancel := context.WithTimeout(w.t.Context(), 10*time.Second)
	defer cancel()
	_, err := w.s3.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(w.srv.Bucket), Key: aws.String(nodeid.LeaseKey(prefix, id)), Body: strings.NewReader(body),
		Metadata: map[string]string{"taskid": "intruder", "version": strconv.FormatInt(v, 10), "acquirable": "true"},
	})
	if err != nil {
		w.t.Fatalf("overwrite lease %d: %v", id, err)
	}
}

// members returns the pids of this world's member processes by node ID,
// read from /proc: the program w.exe, as the member its command line
// names (etcd's --name node-N) or else NODE_ID in its environment.
func (w *world) members() map[int][]int {
	out := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || len(cmdline) == 0 {
			continue
		}
		argv0, _, _ := bytes.Cut(cmdline, []byte{0})
		if filepath.Base(string(argv0)) != w.exe {
			continue
		}
		environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			continue
		}
		id, mine := -1, false
		for _, kv := range bytes.Split(environ, []byte{0}) {
			if string(kv) == "E2E_WORLD="+w.id {
				mine = true
			}
			if v, ok := bytes.CutPrefix(kv, []byte("NODE_ID=")); ok {
				if n, err := strconv.Atoi(string(v)); err == nil {
					id = n
				}
			}
		}
		// etcd names its member on the command line (--name node-N): that
		// name, not the environment, is the member it runs as.
		argv := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if i := slices.Index(argv, "--name"); i >= 0 && i+1 < len(argv) {
			id = -1
			if n, ok := strings.CutPrefix(argv[i+1], "node-"); ok {
				if v, err := strconv.Atoi(n); err == nil {
					id = v
				}
			}
		}
		if mine && id >= 0 {
			out[id] = append(out[id], pid)
		}
	}
	return out
}

// procWatch samples /proc until stopped and keeps the most processes seen
// at once running as each node ID.
type procWatch struct {
	stop    chan struct{}
	done    chan struct{}
	most    map[int]int
	samples int
}

func (w *world) watchMembers() *procWatch {
	pw := &procWatch{stop: make(chan struct{}), done: make(chan struct{}), most: map[int]int{}}
	go func() {
		defer close(pw.done)
		for {
			for id, pids := range w.members() {
				pw.most[id] = max(pw.most[id], len(pids))
			}
			pw.samples++
			select {
			case <-pw.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return pw
}

// finish stops the watch and fails the test if two processes ever ran as
// the same member.
func (pw *procWatch) finish(t *testing.T) {
	t.Helper()
	close(pw.stop)
	<-pw.done
	for id := range clusterSize {
		switch n := pw.most[id]; {
		case n == 0: // the check would pass on a /proc it cannot read
			t.Errorf("/proc: member %d never seen in %d samples", id, pw.samples)
		case n > 1:
			t.Errorf("/proc: %d processes ran as member %d at once", n, id)
		}
	}
	t.Logf("/proc sampled %d times every 20 ms: at most %v processes per member", pw.samples, pw.most)
}
