package main

// make demo-etcd: a real etcd cluster under nodeid-init, with the recipe of
// docs/recipes.md, on the embedded S3 server.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/nodeid/nodeid/internal/poll"
	"github.com/nodeid/nodeid/nodeid"
)

const etcdKeys = 1000

// etcdCluster is what the demo's etcdctl talks to.
type etcdCluster struct {
	clients []string // client URL by node ID
}

func (e *etcdCluster) ctl(ctx context.Context, endpoints []string, stdin string, args ...string) (string, error) {
	if endpoints == nil {
		endpoints = e.clients
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "etcdctl", append([]string{"--endpoints=" + strings.Join(endpoints, ","),
		"--dial-timeout=2s", "--command-timeout=5s"}, args...)...)
	cmd.Env = []string{"ETCDCTL_API=3", "PATH=" + os.Getenv("PATH")}
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("etcdctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

func (e *etcdCluster) healthy(ctx context.Context, id int) bool {
	_, err := e.ctl(ctx, []string{e.clients[id]}, "", "endpoint", "health")
	return err == nil
}

// members is `etcdctl member list`: name and member ID, sorted.
func (e *etcdCluster) members(ctx context.Context) ([]string, error) {
	out, err := e.ctl(ctx, nil, "", "member", "list", "-w", "json")
	if err != nil {
		return nil, err
	}
	var list struct {
		Members []struct {
			ID   uint64 `json:"ID"`
			Name string `json:"name"`
		} `json:"members"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, err
	}
	var ms []string
	for _, m := range list.Members {
		ms = append(ms, fmt.Sprintf("%s=%x", m.Name, m.ID))
	}
	sort.Strings(ms)
	return ms, nil
}

// putKeys writes /demo/k0000.. in transactions of 100.
func (e *etcdCluster) putKeys(ctx context.Context) error {
	for from := 0; from < etcdKeys; from += 100 {
		var b strings.Builder
		b.WriteString("\n")
		for i := from; i < from+100; i++ {
			fmt.Fprintf(&b, "put /demo/k%04d v%04d\n", i, i)
		}
		b.WriteString("\n\n")
		if _, err := e.ctl(ctx, nil, b.String(), "txn"); err != nil {
			return err
		}
	}
	return nil
}

// countKeys reads every key back and counts those with the right value.
func (e *etcdCluster) countKeys(ctx context.Context) (int, error) {
	out, err := e.ctl(ctx, nil, "", "get", "--prefix", "/demo/")
	if err != nil {
		return 0, err
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	n := 0
	for i := 0; i+1 < len(lines); i += 2 {
		if strings.TrimPrefix(lines[i], "/demo/k") == strings.TrimPrefix(lines[i+1], "v") {
			n++
		}
	}
	return n, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func demoEtcd(bin, recipe string, keep bool) error {
	for _, tool := range []string{"etcd", "etcdctl"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found: install the Debian packages etcd-server and etcd-client (make test-tools does, as root)", tool)
		}
	}
	recipe, err := filepath.Abs(recipe)
	if err != nil {
		return err
	}
	if _, err := os.Stat(recipe); err != nil {
		return fmt.Errorf("the recipe: %w (run from the repository's root)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	work, err := os.MkdirTemp("", "nodeid-demo-etcd-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Printf("data kept in %s\n", work)
	} else {
		defer os.RemoveAll(work)
	}
	url, stopS3, err := startS3()
	if err != nil {
		return err
	}
	defer stopS3()
	e := &etcdCluster{}
	var peers, clients []string
	for id := range clusterSize {
		cp, err := freePort()
		if err != nil {
			return err
		}
		pp, err := freePort()
		if err != nil {
			return err
		}
		e.clients = append(e.clients, fmt.Sprintf("http://127.0.0.1:%d", cp))
		clients = append(clients, fmt.Sprintf("node-%d=http://127.0.0.1:%d", id, cp))
		peers = append(peers, fmt.Sprintf("node-%d=http://127.0.0.1:%d", id, pp))
	}
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
		"NODEID_DATA_ROOT=" + dataRoot, "NODEID_LOG_FORMAT=json", "NODEID_ADVERTISE_ADDRESS=127.0.0.1",
		"CLUSTER_PEER_URLS=" + strings.Join(peers, ","), "CLUSTER_CLIENT_URLS=" + strings.Join(clients, ","),
		"ETCD_LOGGER=zap", "ETCD_LOG_LEVEL=error", "ETCD_INITIAL_CLUSTER_TOKEN=nodeid-demo",
	}
	repo, err := repository(url)
	if err != nil {
		return err
	}
	fmt.Printf("== etcd under nodeid-init: 3 members + 1 spare, recipe %s, lease %v, S3 inside this process\n", filepath.Base(recipe), lease)
	tl := &timeline{start: time.Now()}
	var tasks []*task
	stopAll := func() {
		for _, tk := range tasks {
			_ = tk.cmd.Process.Signal(syscall.SIGTERM)
		}
		for _, tk := range tasks {
			select {
			case <-tk.done:
			case <-time.After(10 * time.Second):
				_ = tk.cmd.Process.Kill()
			}
		}
		tasks = nil
	}
	defer stopAll()
	n := 0
	start := func() error {
		n++
		tk, err := startTask(bin, fmt.Sprintf("task-%d", n), append(env, "NODEID_LEASE_FILE="+filepath.Join(work, fmt.Sprintf("lease-%d.json", n))), tl, "etcd",
			func(line string) bool { return strings.HasPrefix(line, "etcd-member.sh:") }, "sh", recipe)
		if err == nil {
			tasks = append(tasks, tk)
		}
		return err
	}
	for range clusterSize {
		if err := start(); err != nil {
			return err
		}
	}
	if err := poll.Until(ctx, 30*time.Second, 100*time.Millisecond, "every ID held", func() bool { return countHeld(ctx, repo) == clusterSize }); err != nil {
		return err
	}
	if err := start(); err != nil { // the spare
		return err
	}
	waitHealthy := func(id int) error {
		return poll.Until(ctx, 60*time.Second, 100*time.Millisecond, fmt.Sprintf("member node-%d healthy", id), func() bool { return e.healthy(ctx, id) })
	}
	for id := range clusterSize {
		if err := waitHealthy(id); err != nil {
			return err
		}
	}
	if err := e.putKeys(ctx); err != nil {
		return err
	}
	before, err := e.members(ctx)
	if err != nil {
		return err
	}
	tl.add("etcdctl", fmt.Sprintf("cluster healthy, %d keys written; member list: %s", etcdKeys, strings.Join(before, " ")))

	holder := func(id int) (*task, nodeid.Version, error) {
		r, err := repo.Get(ctx, id)
		if err != nil {
			return nil, 0, err
		}
		for _, tk := range tasks {
			if tk.name == r.Lease.TaskID {
				return tk, r.Lease.Instance.Version, nil
			}
		}
		return nil, 0, fmt.Errorf("node %d held by %q, not a task of the demo", id, r.Lease.TaskID)
	}
	// fault runs one fault on node id's holder and waits for the member to
	// serve again under a successor with version + 1.
	fault := func(id int, what string, sig syscall.Signal) (time.Duration, error) {
		old, v, err := holder(id)
		if err != nil {
			return 0, err
		}
		fmt.Println()
		tl.add("demo", fmt.Sprintf("%s %s (node-%d, version %d)", what, old.name, id, v))
		t0 := time.Now()
		if err := old.cmd.Process.Signal(sig); err != nil {
			return 0, err
		}
		if err := poll.Until(ctx, 30*time.Second, 100*time.Millisecond, fmt.Sprintf("node %d version %d held", id, v+1), func() bool {
			r, err := repo.Get(ctx, id)
			return err == nil && r.Lease.Instance.Version == v+1 && r.Lease.TaskID != old.name && r.Lease.Held()
		}); err != nil {
			return 0, err
		}
		if err := waitHealthy(id); err != nil {
			return 0, err
		}
		took := time.Since(t0)
		keys, err := e.countKeys(ctx)
		if err != nil {
			return 0, err
		}
		after, err := e.members(ctx)
		if err != nil {
			return 0, err
		}
		same := "the same member IDs"
		if strings.Join(after, " ") != strings.Join(before, " ") {
			same = "CHANGED member IDs: " + strings.Join(after, " ")
		}
		tl.add("etcdctl", fmt.Sprintf("node-%d healthy %.1fs after the fault; %d of %d keys; %s", id, took.Seconds(), keys, etcdKeys, same))
		if keys != etcdKeys || strings.Join(after, " ") != strings.Join(before, " ") {
			return took, fmt.Errorf("after %s: %d keys, members %v (before: %v)", what, keys, after, before)
		}
		return took, start() // ECS starts a replacement: the next spare
	}
	crash, err := fault(1, "kill -9 of", syscall.SIGKILL)
	if err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	deploy, err := fault(2, "SIGTERM to", syscall.SIGTERM)
	if err != nil {
		return err
	}
	fmt.Println()
	tl.add("demo", "SIGTERM to every task")
	stopAll()
	fmt.Println()
	fmt.Println("== What happened")
	fmt.Printf("  - kill -9: the supervisor died, the kernel killed its etcd (PDEATHSIG); the spare waited for the\n")
	fmt.Printf("    lease to expire, took node-1 with version+1, COPIED node-1's data (a crash), and etcd rejoined\n")
	fmt.Printf("    as the same member: healthy %.1fs after the kill.\n", crash.Seconds())
	fmt.Printf("  - SIGTERM: etcd stopped cleanly, nodeid-init synced and released the lease; the next spare took\n")
	fmt.Printf("    node-2 at once and HARD-LINKED its files (a graceful stop): healthy %.1fs after the signal.\n", deploy.Seconds())
	fmt.Printf("  - etcdctl: %d of %d keys after each fault; member list unchanged: %s\n", etcdKeys, etcdKeys, strings.Join(before, " "))
	fmt.Println()
	fmt.Println("etcd kept its members and its data through a crash and a deploy. Demo passed.")
	return nil
}
