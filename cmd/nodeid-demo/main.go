// Command nodeid-demo shows nodeid at work on one machine, with no AWS
// account: an S3 server embedded in this process (gofakes3), three
// `nodeid-init run` tasks supervising a toy broker plus one spare, then the
// lease-overwrite experiment, and a timeline of what happened. It ends by
// itself and exits 0 when the cluster healed as it should.
//
//	make demo        (or: go run ./cmd/nodeid-demo -nodeid-init bin/nodeid-init)
//	make demo-etcd   (the same with a real etcd cluster: -etcd; see docs/recipes.md)
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/nodeid/nodeid/internal/poll"
	"github.com/nodeid/nodeid/leasefile"
	"github.com/nodeid/nodeid/nodeid"
)

const (
	bucket      = "demo"
	prefix      = "cluster/"
	clusterSize = 3
	lease       = 3 * time.Second
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "broker" {
		os.Exit(toyBroker())
	}
	bin := flag.String("nodeid-init", "", "path of the nodeid-init binary (default: build it)")
	keep := flag.Bool("keep", false, "keep the data directory for inspection")
	etcd := flag.Bool("etcd", false, "run a real etcd cluster (make demo-etcd) instead of the toy broker")
	recipe := flag.String("recipe", "docs/recipes/etcd-member.sh", "with -etcd: the member script")
	flag.Parse()
	run := func() error { return demo(*bin, *keep) }
	if *etcd {
		run = func() error { return demoEtcd(*bin, *recipe, *keep) }
	}
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "demo failed: %v\n", err)
		os.Exit(1)
	}
}

// toyBroker is the "broker" each task runs: it appends a record to its
// journal every 100 ms, and checks the lease file before every write, as a
// real broker should fence its writes.
func toyBroker() int {
	journal := filepath.Join(os.Getenv("NODE_DATA_DIR"), "journal.log")
	leaseFile := os.Getenv("NODE_LEASE_FILE")
	for seq := 1; ; seq++ {
		if _, err := leasefile.Check(leaseFile); err != nil {
			fmt.Fprintf(os.Stderr, "toy broker %s: not writing: %v\n", os.Getenv("NODE_TASK_ID"), err)
			return 1
		}
		f, err := os.OpenFile(journal, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Fprintf(f, "%s node=%s version=%s task=%s seq=%d\n", time.Now().Format(time.RFC3339Nano),
			os.Getenv("NODE_ID"), os.Getenv("NODE_VERSION"), os.Getenv("NODE_TASK_ID"), seq)
		f.Close()
		time.Sleep(100 * time.Millisecond)
	}
}

// timeline collects what the tasks report, with the time we saw it.
type timeline struct {
	mu     sync.Mutex
	start  time.Time
	events []event
}

type event struct {
	at   time.Duration
	task string
	text string
}

func (tl *timeline) add(task, text string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	e := event{at: time.Since(tl.start), task: task, text: text}
	tl.events = append(tl.events, e)
	fmt.Printf("  %6.2fs  %-8s %s\n", e.at.Seconds(), task, text)
}

func (tl *timeline) find(task, prefix string) (event, bool) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, e := range tl.events {
		if (task == "" || e.task == task) && strings.HasPrefix(e.text, prefix) {
			return e, true
		}
	}
	return event{}, false
}

type task struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	code int
}

func demo(bin string, keep bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Second)
	defer cancel()
	work, err := os.MkdirTemp("", "nodeid-demo-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Printf("data kept in %s\n", work)
	} else {
		defer os.RemoveAll(work)
	}
	if bin == "" {
		bin = filepath.Join(work, "nodeid-init")
		if out, err := exec.Command("go", "build", "-o", bin, "./cmd/nodeid-init").CombinedOutput(); err != nil {
			return fmt.Errorf("build nodeid-init: %v\n%s", err, out)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}

	fmt.Println("== 1. An S3 server inside this process (gofakes3), bucket \"demo\"")
	url, stopS3, err := startS3()
	if err != nil {
		return err
	}
	defer stopS3()
	dataRoot := filepath.Join(work, "efs")
	if err := os.Mkdir(dataRoot, 0o750); err != nil {
		return err
	}
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + work,
		"AWS_ACCESS_KEY_ID=demo", "AWS_SECRET_ACCESS_KEY=demo", "AWS_REGION=us-east-1",
		"AWS_ENDPOINT_URL_S3=" + url, "AWS_CONFIG_FILE=/nonexistent", "AWS_SHARED_CREDENTIALS_FILE=/nonexistent",
		"NODEID_BUCKET=" + bucket, "NODEID_PREFIX=" + prefix, "NODEID_S3_PATH_STYLE=true",
		fmt.Sprintf("NODEID_CLUSTER_SIZE=%d", clusterSize),
		"NODEID_LEASE_DURATION=" + lease.String(), "NODEID_RENEW_INTERVAL=1s", "NODEID_POLL_INTERVAL=500ms",
		"NODEID_DATA_ROOT=" + dataRoot, "NODEID_LOG_FORMAT=json",
	}
	repo, err := repository(url)
	if err != nil {
		return err
	}

	tl := &timeline{start: time.Now()}
	fmt.Printf("== 2. Four tasks start: three for node IDs 0..%d, one spare (lease %v, renew every 1s)\n", clusterSize-1, lease)
	var tasks []*task
	stopAll := func() {
		for _, tk := range tasks {
			_ = tk.cmd.Process.Signal(syscall.SIGTERM)
		}
		for _, tk := range tasks {
			select {
			case <-tk.done:
			case <-time.After(5 * time.Second):
				_ = tk.cmd.Process.Kill()
			}
		}
	}
	defer stopAll()
	for _, name := range []string{"task-a", "task-b", "task-c", "spare"} {
		tk, err := startTask(bin, name, env, tl, "broker", nil, self, "broker")
		if err != nil {
			return err
		}
		tasks = append(tasks, tk)
		if name == "task-c" {
			if err := poll.Until(ctx, 0, 100*time.Millisecond, "every ID held", func() bool { return countHeld(ctx, repo) == clusterSize }); err != nil {
				return errors.New("the three tasks did not acquire their IDs")
			}
		}
	}
	time.Sleep(1500 * time.Millisecond)
	fmt.Println()
	fmt.Println("== 3. Lease table (nodeid-init status)")
	if err := status(bin, env); err != nil {
		return err
	}

	victimID := 2
	rec, err := repo.Get(ctx, victimID)
	if err != nil {
		return err
	}
	victim, oldVersion := rec.Lease.TaskID, rec.Lease.Instance.Version
	fmt.Println()
	fmt.Printf("== 4. Chaos: overwrite %s%d.json (held by %s, version %d) as if task \"abc\" had taken it\n", prefix, victimID, victim, oldVersion)
	overwritten := time.Since(tl.start)
	if err := overwrite(ctx, url, victimID, oldVersion); err != nil {
		return err
	}
	tl.add("chaos", fmt.Sprintf("lease of node %d overwritten by \"abc\"", victimID))
	newVersion := oldVersion + 1
	if err := poll.Until(ctx, 0, 100*time.Millisecond, fmt.Sprintf("node %d v%d held by the spare", victimID, newVersion), func() bool {
		r, err := repo.Get(ctx, victimID)
		return err == nil && r.Lease.Instance.Version == newVersion && r.Lease.TaskID == "spare"
	}); err != nil {
		return fmt.Errorf("the spare did not take node %d: %w", victimID, err)
	}
	time.Sleep(1500 * time.Millisecond)
	fmt.Println()
	fmt.Println("== 5. Lease table after healing")
	if err := status(bin, env); err != nil {
		return err
	}
	fmt.Println()
	fmt.Println("== 6. Stopping the tasks (SIGTERM: each broker stops, then its lease is released)")
	victimTask := tasks[0]
	for _, tk := range tasks {
		if tk.name == victim {
			victimTask = tk
		}
	}
	select { // the victim exits on its own after its loss
	case <-victimTask.done:
	case <-time.After(2 * time.Second):
	}
	stopAll()
	return verdict(tl, dataRoot, victimTask, victimID, oldVersion, newVersion, overwritten)
}

// verdict checks what should have happened and says it in plain words.
func verdict(tl *timeline, dataRoot string, victimTask *task, id int, oldV, newV nodeid.Version, overwritten time.Duration) error {
	victim := victimTask.name
	fmt.Println()
	fmt.Println("== 7. What happened")
	lost, okLost := tl.find(victim, "lease lost")
	killed, okKilled := tl.find(victim, "broker killed")
	took, okTook := tl.find("spare", fmt.Sprintf("acquired node %d version %d", id, newV))
	var problems []string
	if !okLost || !okKilled {
		problems = append(problems, victim+" did not report the loss and kill its broker")
	}
	if !okTook {
		problems = append(problems, "the spare did not report taking the node")
	}
	if victimTask.code != nodeid.ExitCodeLeaseLost {
		problems = append(problems, fmt.Sprintf("%s exited with %d, not 3", victim, victimTask.code))
	}
	oldJournal := filepath.Join(dataRoot, fmt.Sprintf("node-%d", id), fmt.Sprintf("v%d", oldV), "journal.log")
	newJournal := filepath.Join(dataRoot, fmt.Sprintf("node-%d", id), fmt.Sprintf("v%d", newV), "journal.log")
	oldLines := lines(oldJournal)
	newLines := lines(newJournal)
	copied := 0
	for i, l := range oldLines {
		if i < len(newLines) && newLines[i] == l {
			copied++
		}
	}
	if len(oldLines) == 0 || copied != len(oldLines) {
		problems = append(problems, fmt.Sprintf("v%d holds %d of v%d's %d records", newV, copied, oldV, len(oldLines)))
	}
	// No write of the old holder after the new one took over: the records'
	// timestamps come from this host's clock, shared by all the tasks.
	takeover := tl.start.Add(took.at)
	var lastOld time.Time
	for _, l := range oldLines {
		if ts, err := time.Parse(time.RFC3339Nano, strings.Fields(l)[0]); err == nil && ts.After(lastOld) {
			lastOld = ts
		}
	}
	if okTook && !lastOld.Before(takeover) {
		problems = append(problems, fmt.Sprintf("%s's broker wrote at %s, after the spare took over", victim, lastOld.Format(time.TimeOnly)))
	}
	if okLost && okKilled && okTook {
		fmt.Printf("  - %.1fs after the overwrite, %s's renewal was refused (HTTP 412): it knew at once that node %d was no longer its own.\n",
			(lost.at - overwritten).Seconds(), victim, id)
		fmt.Printf("  - It killed its broker immediately (SIGKILL) and exited with code 3; ECS would start a new task.\n")
		fmt.Printf("  - The spare waited until S3's own clock showed the lease written by \"abc\" expired\n")
		fmt.Printf("    (Date - Last-Modified >= %v + 1s, both in whole seconds; no task's own clock was trusted),\n", lease)
		fmt.Printf("    then took node %d with version %d, %.1fs after the overwrite.\n", id, newV, (took.at - overwritten).Seconds())
		fmt.Printf("  - Its data directory node-%d/v%d was copied from v%d (%d records carried over, none lost);\n", id, newV, oldV, copied)
		fmt.Printf("    v%d was copied, not hard-linked, because the previous holder had not released its lease.\n", newV)
		fmt.Printf("  - No two tasks wrote as node %d at once: the old broker's last record is %.1fs older than the takeover.\n",
			id, takeover.Sub(lastOld).Seconds())
		_ = killed
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	fmt.Println()
	fmt.Println("The cluster healed: three nodes, IDs 0-2, each held once, versions only grew. Demo passed.")
	return nil
}

func lines(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\n"), "\n")
}

// startTask runs `nodeid-init run -- CMD...` (the toy broker: nodeid-demo
// broker) and turns its JSON log lines into timeline entries; noun names
// what CMD is; CMD's own lines are shown when show is nil or says so.
func startTask(bin, name string, env []string, tl *timeline, noun string, show func(string) bool, command ...string) (*task, error) {
	cmd := exec.Command(bin, append([]string{"run", "--"}, command...)...)
	cmd.Env = append(append([]string{}, env...), "NODEID_TASK_ID="+name,
		"NODEID_LEASE_FILE="+filepath.Join(os.TempDir(), fmt.Sprintf("nodeid-demo-%s-%d.json", name, os.Getpid())))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	tk := &task{name: name, cmd: cmd, done: make(chan struct{})}
	tl.add(name, "started")
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if text, own := describe(sc.Bytes(), noun); text != "" && (!own || show == nil || show(text)) {
				tl.add(name, text)
			}
		}
	}()
	go func() {
		err := cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			tk.code = ee.ExitCode()
		}
		close(tk.done)
	}()
	return tk, nil
}

// describe turns a supervisor's log line into a timeline entry; own says
// the line is not the supervisor's.
func describe(line []byte, noun string) (text string, own bool) {
	var l struct {
		Msg        string `json:"msg"`
		NodeID     *int   `json:"node_id"`
		Version    int64  `json:"version"`
		Reason     string `json:"reason"`
		Err        string `json:"err"`
		FromVer    *int64 `json:"from_version"` // absent when it started empty
		FilesCopy  int64  `json:"files_copied"`
		FilesLink  int64  `json:"files_linked"`
		Graceful   *bool  `json:"previous_graceful"`
		ClusterSiz int    `json:"cluster_size"`
	}
	if json.Unmarshal(line, &l) != nil || l.Msg == "" {
		return strings.TrimSpace(string(line)), true // the broker's own words
	}
	switch l.Msg {
	case "acquired node id":
		how := "released or new"
		if l.Graceful != nil && !*l.Graceful {
			how = "taken over after expiry"
		}
		return fmt.Sprintf("acquired node %d version %d (%s)", *l.NodeID, l.Version, how), false
	case "no node id free, waiting":
		return "every node ID is held: waiting", false
	case "prepared":
		if l.FromVer == nil {
			return fmt.Sprintf("data directory node-%d/v%d ready (started empty)", *l.NodeID, l.Version), false
		}
		return fmt.Sprintf("data directory node-%d/v%d ready (from version %d: %d files copied, %d linked)", *l.NodeID, l.Version, *l.FromVer, l.FilesCopy, l.FilesLink), false
	case "lease lost":
		return fmt.Sprintf("lease lost: %s", l.Reason), false
	case "command killed: lease lost":
		return noun + " killed (SIGKILL); exiting with code 3", false
	case "released node id":
		return fmt.Sprintf("released node %d version %d", *l.NodeID, l.Version), false
	case "command started":
		return noun + " started", false
	}
	return "", false
}

func status(bin string, env []string) error {
	cmd := exec.Command(bin, "status")
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

func countHeld(ctx context.Context, repo nodeid.Repository) int {
	n := 0
	for id := 0; id < clusterSize; id++ {
		if r, err := repo.Get(ctx, id); err == nil && r.Lease.Held() {
			n++
		}
	}
	return n
}

// overwrite plays the chaos script: an unconditional PUT of another task's
// lease with a fresh timestamp.
func overwrite(ctx context.Context, url string, id int, v nodeid.Version) error {
	client := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(url), UsePathStyle: true,
		Credentials:                aws.AnonymousCredentials{},
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired})
	body := fmt.Sprintf(`{"taskId":"abc","timestamp":%d,"nodeInstance":{"id":%d,"version":%d},"knownVersionMappings":{"mappingsByNodeId":{}}}`,
		time.Now().Add(lease).UnixMilli(), id, v)
	_, err := client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(nodeid.LeaseKey(prefix, id)),
		Body:     strings.NewReader(body),
		Metadata: map[string]string{"taskid": "abc", "version": fmt.Sprint(v), "acquirable": "true"},
	})
	return err
}

func repository(url string) (*nodeid.S3Repository, error) {
	client, err := nodeid.NewS3Client(context.Background(), nodeid.S3Config{Endpoint: url, Region: "us-east-1", PathStyle: true, AccessKey: "demo", SecretKey: "demo"})
	if err != nil {
		return nil, err
	}
	return nodeid.NewS3Repository(client, bucket, prefix, 0)
}

// startS3 serves gofakes3 on a loopback port with the demo bucket.
func startS3() (string, func(), error) {
	backend := s3mem.New()
	if err := backend.CreateBucket(bucket); err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: gofakes3.New(backend).Server(), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close() }, nil
}
