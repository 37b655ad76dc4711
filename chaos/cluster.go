package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nodeid/nodeid/chaos/checker"
	"github.com/nodeid/nodeid/clock"
	"github.com/nodeid/nodeid/internal/faultproxy"
	"github.com/nodeid/nodeid/internal/poll"
	"github.com/nodeid/nodeid/leasefile"
	"github.com/nodeid/nodeid/nodeid"
)

// prefix is the key prefix of every experiment's lease objects.
const prefix = "chaos/"

// Timing is the lease timing of an experiment's tasks: short, so failures
// heal in seconds, but with the same ratios as production (R = L/4, m = L/5).
type Timing struct {
	Lease, Renew, Poll time.Duration
}

// ShortTiming is what most experiments use.
var ShortTiming = Timing{Lease: 2 * time.Second, Renew: 500 * time.Millisecond, Poll: 200 * time.Millisecond}

// Margin is the supervisor's default safety margin m = L/5: how long before
// the lease's end the holder fences itself.
func (t Timing) Margin() time.Duration { return t.Lease / 5 }

// Cluster is one experiment's world: a gateway with a bucket, a shared data
// root, and the tasks, each behind its own fault proxy.
type Cluster struct {
	Size   int
	Timing Timing
	Root   string // the shared data root, node-N/vK below it
	Events string // the brokers' event logs, one per task

	cfg   Config
	dir   string
	gw    *gateway
	s3    *s3.Client
	repo  *nodeid.S3Repository
	logf  func(format string, args ...any)
	mu    sync.Mutex
	tasks []*Task
}

func newCluster(ctx context.Context, cfg Config, dir string, size int, timing Timing, logf func(string, ...any)) (*Cluster, error) {
	c := &Cluster{Size: size, Timing: timing, cfg: cfg, dir: dir, logf: logf,
		Root: filepath.Join(dir, "data"), Events: filepath.Join(dir, "events")}
	for _, d := range []string{c.Root, c.Events, filepath.Join(dir, "logs"), filepath.Join(dir, "leases"), filepath.Join(dir, "home")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	gw, err := startGateway(ctx, cfg.Versity, dir)
	if err != nil {
		return nil, err
	}
	c.gw = gw
	if c.s3, err = gw.client(ctx); err != nil {
		gw.stop()
		return nil, err
	}
	if c.repo, err = nodeid.NewS3Repository(c.s3, gw.Bucket, prefix, 0); err != nil {
		gw.stop()
		return nil, err
	}
	return c, nil
}

// Task is one `nodeid-init run -- testbroker` process with its own fault
// proxy between it and S3.
type Task struct {
	Name  string
	Proxy *faultproxy.Proxy
	Cmd   *exec.Cmd

	eventLog  string
	logPath   string
	leasePath string
	done      chan struct{}
	code      int
	exitMono  time.Duration

	mu     sync.Mutex
	offset int64
	events []checker.Event
}

// Start starts a task named name (also its task ID); env entries override
// the defaults.
func (c *Cluster) Start(name string, env ...string) (*Task, error) { return c.start(name, nil, env...) }

// start is Start; with stderr set, the supervisor's stdout and stderr go
// there instead of its log file (which then stays empty).
func (c *Cluster) start(name string, stderr *os.File, env ...string) (*Task, error) {
	p, err := faultproxy.Start(c.gw.URL)
	if err != nil {
		return nil, err
	}
	t := &Task{Name: name, Proxy: p, done: make(chan struct{}),
		eventLog: filepath.Join(c.Events, name+".jsonl"), logPath: filepath.Join(c.dir, "logs", name+".log"),
		leasePath: filepath.Join(c.dir, "leases", name+".json")}
	out, err := os.Create(t.logPath)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("task log: %w", err)
	}
	t.Cmd = exec.Command(c.cfg.NodeInit, "run", "--", c.cfg.Broker)
	t.Cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + filepath.Join(c.dir, "home"),
		"AWS_ACCESS_KEY_ID=" + c.gw.AccessKey, "AWS_SECRET_ACCESS_KEY=" + c.gw.SecretKey, "AWS_REGION=" + gwRegion,
		"AWS_ENDPOINT_URL_S3=" + p.URL,
		"AWS_CONFIG_FILE=/nonexistent", "AWS_SHARED_CREDENTIALS_FILE=/nonexistent", "AWS_EC2_METADATA_DISABLED=true",
		"NODEID_BUCKET=" + c.gw.Bucket, "NODEID_PREFIX=" + prefix, "NODEID_S3_PATH_STYLE=true",
		fmt.Sprintf("NODEID_CLUSTER_SIZE=%d", c.Size),
		"NODEID_LEASE_DURATION=" + c.Timing.Lease.String(),
		"NODEID_RENEW_INTERVAL=" + c.Timing.Renew.String(),
		"NODEID_POLL_INTERVAL=" + c.Timing.Poll.String(),
		"NODEID_ACQUIRE_TIMEOUT=2m", "NODEID_STOP_TIMEOUT=5s",
		"NODEID_TASK_ID=" + name,
		"NODEID_DATA_ROOT=" + c.Root,
		"NODEID_LEASE_FILE=" + t.leasePath,
		"NODEID_LOG_FORMAT=json",
		"CHAOS_EVENT_LOG=" + t.eventLog,
		"CHAOS_WRITE_INTERVAL=20ms",
		"CHAOS_MAX_RUN=3m",
	}, env...)
	t.Cmd.Stdout, t.Cmd.Stderr = out, out
	if stderr != nil {
		t.Cmd.Stdout, t.Cmd.Stderr = stderr, stderr
	}
	// Its own process group, so an experiment can stop the supervisor
	// without stopping us; Pdeathsig so it dies if the harness is killed.
	t.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := t.Cmd.Start(); err != nil {
		out.Close()
		p.Close()
		return nil, fmt.Errorf("start task %s: %w", name, err)
	}
	go func() {
		err := t.Cmd.Wait()
		t.exitMono = clock.SystemBoottime()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			t.code = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				t.code = 128 + int(ws.Signal())
			}
		default:
			t.code = -1
		}
		out.Close()
		close(t.done)
	}()
	c.mu.Lock()
	c.tasks = append(c.tasks, t)
	c.mu.Unlock()
	return t, nil
}

// StartN starts n tasks named base-0.. and returns them.
func (c *Cluster) StartN(base string, n int, env ...string) ([]*Task, error) {
	var ts []*Task
	for i := range n {
		t, err := c.Start(fmt.Sprintf("%s-%d", base, i), env...)
		if err != nil {
			return ts, err
		}
		ts = append(ts, t)
	}
	return ts, nil
}

// Tasks returns every task started so far.
func (c *Cluster) Tasks() []*Task {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Task(nil), c.tasks...)
}

// Running reports whether the supervisor has not exited.
func (t *Task) Running() bool {
	select {
	case <-t.done:
		return false
	default:
		return true
	}
}

// Exit returns the supervisor's exit code and when it exited (system
// monotonic clock); ok is false while it runs.
func (t *Task) Exit() (code int, at time.Duration, ok bool) {
	select {
	case <-t.done:
		return t.code, t.exitMono, true
	default:
		return 0, 0, false
	}
}

// Events returns the broker's events so far, reading only what is new.
func (t *Task) Events() []checker.Event {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, err := os.Open(t.eventLog)
	if err != nil {
		return t.events
	}
	defer f.Close()
	if _, err := f.Seek(t.offset, io.SeekStart); err != nil {
		return t.events
	}
	b, _ := io.ReadAll(f)
	// Only complete lines; a partial one is read again next time.
	end := bytes.LastIndexByte(b, '\n')
	if end < 0 {
		return t.events
	}
	sc := bufio.NewScanner(bytes.NewReader(b[:end+1]))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e checker.Event
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			t.events = append(t.events, e)
		}
	}
	t.offset += int64(end + 1)
	return t.events
}

// Identity returns the broker's start event, if it has started.
func (t *Task) Identity() (checker.Event, bool) {
	for _, e := range t.Events() {
		if e.Kind == checker.KindStart {
			return e, true
		}
	}
	return checker.Event{}, false
}

// Holds reports whether the task's broker has written at least once.
func (t *Task) Holds() bool {
	for _, e := range t.Events() {
		if e.Kind == checker.KindWrite {
			return true
		}
	}
	return false
}

// Log returns the supervisor's log.
func (t *Task) Log() string {
	b, _ := os.ReadFile(t.logPath)
	return string(b)
}

// LogHas reports whether the supervisor logged a line with this msg.
func (t *Task) LogHas(msg string) bool {
	return strings.Contains(t.Log(), `"msg":"`+msg+`"`)
}

// LeaseFile returns the lease the supervisor last published for its broker.
func (t *Task) LeaseFile() (leasefile.Lease, error) { return leasefile.Read(t.leasePath) }

// AfterRenewal returns right after the supervisor's next successful
// renewal (the lease file's deadline moves). Faults injected then hit the
// holder at the worst moment, a whole renew interval (or lease) away from its
// next renewal (or deadline), so the figures measured are worst cases rather
// than depending on the phase of the renewal cycle.
func (t *Task) AfterRenewal(ctx context.Context, timeout time.Duration) error {
	l, err := t.LeaseFile()
	if err != nil {
		return err
	}
	return poll.Until(ctx, timeout, time.Millisecond, "a renewal by "+t.Name, func() bool {
		n, err := t.LeaseFile()
		return err == nil && n.ValidUntilBoottimeNs != l.ValidUntilBoottimeNs
	})
}

// Signal sends sig to the supervisor only.
func (t *Task) Signal(sig syscall.Signal) error {
	if !t.Running() {
		return fmt.Errorf("task %s has exited", t.Name)
	}
	return syscall.Kill(t.Cmd.Process.Pid, sig)
}

// SignalAll sends sig to the supervisor's process group and to its
// broker's (the supervisor puts the broker in a group of its own).
func (t *Task) SignalAll(sig syscall.Signal) error {
	if err := syscall.Kill(-t.Cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("signal %s: %w", t.Name, err)
	}
	if id, ok := t.Identity(); ok && id.PID > 0 {
		if err := syscall.Kill(-id.PID, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("signal broker of %s: %w", t.Name, err)
		}
	}
	return nil
}

// Wait waits until the supervisor exits or the timeout passes.
func (t *Task) Wait(timeout time.Duration) (int, bool) {
	select {
	case <-t.done:
		return t.code, true
	case <-time.After(timeout):
		return 0, false
	}
}

// pollEvery is how often the harness checks what it waits for.
const pollEvery = 20 * time.Millisecond

// WaitHolders waits until n tasks' brokers are writing and returns them by
// node ID.
func (c *Cluster) WaitHolders(ctx context.Context, n int, timeout time.Duration) (map[int]*Task, error) {
	var holders map[int]*Task
	err := poll.Until(ctx, timeout, pollEvery, fmt.Sprintf("%d holders", n), func() bool {
		holders = c.Holders()
		return len(holders) >= n
	})
	return holders, err
}

// Holders returns, per node ID, the running task whose broker has written
// with the highest version.
func (c *Cluster) Holders() map[int]*Task {
	best := map[int]int64{}
	out := map[int]*Task{}
	for _, t := range c.Tasks() {
		if !t.Running() || !t.Holds() {
			continue
		}
		id, _ := t.Identity()
		if v, ok := best[id.Node]; !ok || id.Version > v {
			best[id.Node], out[id.Node] = id.Version, t
		}
	}
	return out
}

// FirstWrite returns the earliest write of node with a version above v,
// across all tasks: when a replacement started acting as the node.
func (c *Cluster) FirstWrite(node int, above int64) (checker.Event, *Task, bool) {
	var first checker.Event
	var who *Task
	for _, t := range c.Tasks() {
		for _, e := range t.Events() {
			if e.Kind == checker.KindWrite && e.Node == node && e.Version > above && (who == nil || e.Mono < first.Mono) {
				first, who = e, t
				break
			}
		}
	}
	return first, who, who != nil
}

// LeaseKey returns the object key of node id.
func (c *Cluster) LeaseKey(id int) string { return nodeid.LeaseKey(prefix, id) }

// Lease reads node id's lease object directly from the gateway.
func (c *Cluster) Lease(ctx context.Context, id int) (nodeid.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rec, err := c.repo.Get(ctx, id)
	return rec.Lease, err
}

// PutObject writes an object unconditionally, bypassing the proxies, as an
// operator (or a bug elsewhere) would.
func (c *Cluster) PutObject(ctx context.Context, key, body string, meta map[string]string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := c.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(c.gw.Bucket), Key: aws.String(key),
		Body: strings.NewReader(body), Metadata: meta})
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// DeleteObject deletes an object, bypassing the proxies.
func (c *Cluster) DeleteObject(ctx context.Context, key string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := c.s3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(c.gw.Bucket), Key: aws.String(key)}); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

// ProxyRequests sums the requests every task's proxy received.
func (c *Cluster) ProxyRequests() int {
	n := 0
	for _, t := range c.Tasks() {
		n += t.Proxy.Requests()
	}
	return n
}

// shutdown stops every task: SIGTERM (waiting tasks give up, holders drain
// and release), then SIGKILL after a grace period; a stopped process group
// is continued first so it can act on the signal. Then the proxies and the
// gateway stop.
func (c *Cluster) shutdown() {
	tasks := c.Tasks()
	for _, t := range tasks {
		if t.Running() {
			t.Proxy.Pass()
			_ = t.SignalAll(syscall.SIGCONT)
			_ = t.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.After(10 * time.Second)
	for _, t := range tasks {
		select {
		case <-t.done:
		case <-deadline:
		}
		if t.Running() {
			c.logf("task %s did not stop on SIGTERM; killing it", t.Name)
			_ = t.SignalAll(syscall.SIGKILL)
			<-t.done
		}
	}
	for _, t := range tasks {
		t.Proxy.Close()
	}
	c.gw.stop()
}
