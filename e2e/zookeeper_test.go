package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// Debian's zookeeper package (3.8): the client script and the server's
// class path, which the recipe uses by default.
const (
	zkCli = "/usr/share/zookeeper/bin/zkCli.sh"
	zkJar = "/usr/share/java/zookeeper.jar"
	// A small JVM that starts fast: the servers and every zkCli.sh.
	zkJVM = "-Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1"
)

// TestZooKeeperUnderNodeid runs a 3-server ZooKeeper ensemble, each
// server under `nodeid-init run` with docs/recipes/zookeeper-member.sh,
// plus a spare task, through the scenarios of issue 27.
func TestZooKeeperUnderNodeid(t *testing.T) {
	needTools(t, "zookeeper", "java", zkCli, zkJar)
	z := newZooKeeper(t)
	w := newWorld(t, "zookeeper-member.sh", "java", func(tk *task) []string {
		return []string{"ZK_SERVERS=" + z.servers, "ZK_CONF_DIR=" + tk.dir + "/zookeeper", "ZK_JVMFLAGS=" + zkJVM}
	})
	runScenarios(t, w, z)
}

// zooKeeper is the ensemble as its clients see it: a client port per ID.
type zooKeeper struct {
	clients []string // host:port by node ID
	servers string   // ZK_SERVERS
}

func newZooKeeper(t *testing.T) *zooKeeper {
	ports := freePorts(t, 3*clusterSize)
	z := &zooKeeper{}
	var servers []string
	for id := range clusterSize {
		z.clients = append(z.clients, fmt.Sprintf("127.0.0.1:%d", ports[id]))
		servers = append(servers, fmt.Sprintf("%d=127.0.0.1:%d:%d;%d", id, ports[clusterSize+id], ports[2*clusterSize+id], ports[id]))
	}
	z.servers = strings.Join(servers, ",")
	return z
}

// fourLetters sends a four-letter word to server id and returns the answer.
func (z *zooKeeper) fourLetters(id int, word string) (string, error) {
	c, err := net.DialTimeout("tcp", z.clients[id], 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, word); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

var zkMode = regexp.MustCompile(`(?m)^Mode: (leader|follower)$`)

func (z *zooKeeper) healthy(_ context.Context, id int) error {
	out, err := z.fourLetters(id, "srvr")
	if err != nil {
		return err
	}
	if !zkMode.MatchString(out) {
		return fmt.Errorf("srvr: %q", strings.TrimSpace(out))
	}
	return nil
}

// cli runs zkCli.sh with the commands on its standard input against the
// servers (every server when nil).
func (z *zooKeeper) cli(ctx context.Context, servers []string, cmds []string) (string, error) {
	if servers == nil {
		servers = z.clients
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, zkCli, "-server", strings.Join(servers, ","))
	cmd.Env = append(os.Environ(), "CLIENT_JVMFLAGS="+zkJVM)
	cmd.Stdin = strings.NewReader(strings.Join(cmds, "\n") + "\nquit\n")
	out, err := cmd.CombinedOutput()
	// zkCli.sh exits with the status of its last command (1 for a missing
	// node): the callers read the answers; a session that never connected
	// is the error.
	if err != nil && (ctx.Err() != nil || !bytes.Contains(out, []byte("state:SyncConnected"))) {
		return string(out), fmt.Errorf("zkCli.sh: %w: %s", err, tail2(string(out)))
	}
	return string(out), nil
}

func tail2(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-3):], " | ")
}

// put creates the znodes through server id, with their parents.
func (z *zooKeeper) put(ctx context.Context, id int, kvs []kv) error {
	var cmds []string
	parents := map[string]bool{}
	for _, e := range kvs {
		for p := parentOf(e.key); p != "/" && !parents[p]; p = parentOf(p) {
			parents[p] = true
		}
	}
	ps := make([]string, 0, len(parents))
	for p := range parents {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return len(ps[i]) < len(ps[j]) })
	for _, p := range ps {
		cmds = append(cmds, "create "+p) // an existing parent answers "Node already exists"
	}
	for _, e := range kvs {
		cmds = append(cmds, "create "+e.key+" "+e.value)
	}
	out, err := z.cli(ctx, []string{z.clients[id]}, cmds)
	if err != nil {
		return err
	}
	for _, e := range kvs {
		if !strings.Contains(out, "Created "+e.key+"\n") {
			return fmt.Errorf("zkCli.sh did not create %s: %s", e.key, tail2(out))
		}
	}
	return nil
}

func parentOf(p string) string {
	i := strings.LastIndex(p, "/")
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

var zkList = regexp.MustCompile(`(?m)^\[(.*)\]$`)

// get lists dir's children, then reads each in one zkCli.sh session: a
// value line or "Node does not exist" per get, in order. A ZooKeeper
// server answers reads from its own copy.
func (z *zooKeeper) get(ctx context.Context, id int, dir string) (map[string]string, error) {
	server := []string{z.clients[id]}
	out, err := z.cli(ctx, server, []string{"ls " + dir})
	got := map[string]string{}
	if err != nil {
		return nil, err
	}
	if strings.Contains(out, "Node does not exist: "+dir) {
		return got, nil
	}
	m := zkList.FindStringSubmatch(out)
	if m == nil {
		return nil, fmt.Errorf("ls %s: no list in %s", dir, tail2(out))
	}
	if m[1] == "" {
		return got, nil
	}
	var keys, cmds []string
	for _, name := range strings.Split(m[1], ", ") {
		keys = append(keys, dir+"/"+name)
		cmds = append(cmds, "get "+dir+"/"+name)
	}
	out, err = z.cli(ctx, server, cmds)
	if err != nil {
		return nil, err
	}
	var answers []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "val-") || strings.HasPrefix(l, "Node does not exist") {
			answers = append(answers, l)
		}
	}
	if len(answers) != len(keys) {
		return nil, fmt.Errorf("%d gets, %d answers: %s", len(keys), len(answers), tail2(out))
	}
	for i, k := range keys {
		if strings.HasPrefix(answers[i], "val-") {
			got[k] = answers[i]
		}
	}
	return got, nil
}

var (
	zkServerID = regexp.MustCompile(`(?m)^serverId=(\d+)$`)
	zkSynced   = regexp.MustCompile(`(?m)^zk_synced_followers\s+(\d+)$`)
)

// identity is each server's own myid (the conf word) and the ensemble's
// shape: one leader with every other server a synced follower.
func (z *zooKeeper) identity(_ context.Context) (string, error) {
	var ids []string
	leaders := 0
	for id := range clusterSize {
		conf, err := z.fourLetters(id, "conf")
		if err != nil {
			return "", err
		}
		m := zkServerID.FindStringSubmatch(conf)
		if m == nil {
			return "", fmt.Errorf("conf of %s: no serverId", z.clients[id])
		}
		ids = append(ids, fmt.Sprintf("%s=myid %s", z.clients[id], m[1]))
		srvr, err := z.fourLetters(id, "srvr")
		if err != nil {
			return "", err
		}
		mode := zkMode.FindStringSubmatch(srvr)
		if mode == nil {
			return "", fmt.Errorf("server %d not serving: %q", id, strings.TrimSpace(srvr))
		}
		if mode[1] == "leader" {
			leaders++
			mntr, err := z.fourLetters(id, "mntr")
			if err != nil {
				return "", err
			}
			if s := zkSynced.FindStringSubmatch(mntr); s == nil || s[1] != fmt.Sprint(clusterSize-1) {
				return "", fmt.Errorf("leader %d: synced followers %v", id, s)
			}
		}
	}
	if leaders != 1 {
		return "", fmt.Errorf("%d leaders", leaders)
	}
	return strings.Join(ids, "; ") + fmt.Sprintf("; one leader, %d synced followers", clusterSize-1), nil
}

// writer is one zkCli.sh session connected to the ensemble, fed a create
// every 200 ms; a "Created" line is a confirmed write.
func (z *zooKeeper) writer(ctx context.Context, dir string) *writer {
	ctx, cancel := context.WithCancel(ctx)
	wr := &writer{stop: cancel, done: make(chan struct{})}
	cmd := exec.Command(zkCli, "-server", strings.Join(z.clients, ","))
	cmd.Env = append(os.Environ(), "CLIENT_JVMFLAGS="+zkJVM)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		panic(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		panic(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		wr.end = time.Now()
		close(wr.done)
		return wr
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if k, ok := strings.CutPrefix(sc.Text(), "Created "); ok && strings.HasPrefix(k, dir+"/") {
				wr.ack(k)
			}
		}
	}()
	go func() {
		defer close(wr.done)
		fmt.Fprintf(stdin, "create %s\n", dir)
		for i := 0; ; i++ {
			k := fmt.Sprintf("%s/w%05d", dir, i)
			fmt.Fprintf(stdin, "create %s %s\n", k, valueOf(k))
			select {
			case <-ctx.Done():
				wr.mu.Lock()
				wr.end = time.Now()
				wr.mu.Unlock()
				// Let the last creates finish, then count what was sent
				// but not confirmed.
				time.Sleep(2 * time.Second)
				wr.mu.Lock()
				wr.failed = i + 1 - len(wr.keys)
				wr.mu.Unlock()
				_, _ = io.WriteString(stdin, "quit\n")
				stdin.Close()
				done := make(chan struct{})
				go func() { _ = cmd.Wait(); close(done) }()
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					_ = cmd.Process.Kill()
					<-done
				}
				<-read
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return wr
}
