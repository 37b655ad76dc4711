package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestEtcdUnderNodeid runs a 3-member etcd cluster, each member under
// `nodeid-init run` with docs/recipes/etcd-member.sh, plus a spare task,
// through the scenarios of issue 27.
func TestEtcdUnderNodeid(t *testing.T) {
	needTools(t, "etcd-server etcd-client", "etcd", "etcdctl")
	e := newEtcd(t)
	token := fmt.Sprintf("e2e-%d", time.Now().UnixNano())
	w := newWorld(t, "etcd-member.sh", "etcd", func(*task) []string {
		return []string{
			"CLUSTER_PEER_URLS=" + e.peerMap, "CLUSTER_CLIENT_URLS=" + e.clientMap,
			"ETCD_INITIAL_CLUSTER_TOKEN=" + token,
			// etcd's next WAL segment, preallocated empty: not data, and
			// etcd makes a new one at start (docs/recipes.md).
			"NODEID_SKIP=member/wal/*.tmp", "ETCD_LOGGER=zap", "ETCD_LOG_LEVEL=warn",
		}
	})
	runScenarios(t, w, e)
}

// etcd is the cluster as its clients see it: a client URL per node ID.
type etcd struct {
	clients            []string
	peerMap, clientMap string // CLUSTER_PEER_URLS, CLUSTER_CLIENT_URLS
}

func newEtcd(t *testing.T) *etcd {
	ports := freePorts(t, 2*clusterSize)
	e := &etcd{}
	var peers, clients []string
	for id := range clusterSize {
		c := fmt.Sprintf("http://127.0.0.1:%d", ports[id])
		e.clients = append(e.clients, c)
		clients = append(clients, fmt.Sprintf("node-%d=%s", id, c))
		peers = append(peers, fmt.Sprintf("node-%d=http://127.0.0.1:%d", id, ports[clusterSize+id]))
	}
	e.peerMap, e.clientMap = strings.Join(peers, ","), strings.Join(clients, ",")
	return e
}

// freePorts returns n loopback ports free at the time of the call.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

// ctl runs etcdctl against the endpoints (every member when nil).
func (e *etcd) ctl(ctx context.Context, endpoints []string, stdin string, args ...string) (string, error) {
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

func (e *etcd) healthy(ctx context.Context, id int) error {
	_, err := e.ctl(ctx, []string{e.clients[id]}, "", "endpoint", "health")
	return err
}

// put writes through member id in transactions of 100 puts (etcd's
// default limit is 128 operations per transaction).
func (e *etcd) put(ctx context.Context, id int, kvs []kv) error {
	for len(kvs) > 0 {
		n := min(len(kvs), 100)
		var b strings.Builder
		b.WriteString("\n") // no comparisons
		for _, p := range kvs[:n] {
			fmt.Fprintf(&b, "put %s %s\n", p.key, p.value)
		}
		b.WriteString("\n\n") // no failure operations
		out, err := e.ctl(ctx, []string{e.clients[id]}, b.String(), "txn")
		if err != nil {
			return err
		}
		if !strings.HasPrefix(out, "SUCCESS") || strings.Count(out, "OK") != n {
			return fmt.Errorf("etcdctl txn: %q", out)
		}
		kvs = kvs[n:]
	}
	return nil
}

func (e *etcd) get(ctx context.Context, id int, dir string) (map[string]string, error) {
	out, err := e.ctl(ctx, []string{e.clients[id]}, "", "get", "--consistency=s", "--prefix", dir+"/")
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	got := map[string]string{}
	if out == "" {
		return got, nil
	}
	if len(lines)%2 != 0 {
		return nil, fmt.Errorf("etcdctl get: %d lines, not key/value pairs", len(lines))
	}
	for i := 0; i < len(lines); i += 2 {
		got[lines[i]] = lines[i+1]
	}
	return got, nil
}

// identity is `etcdctl member list`: each member's name, ID and URLs.
func (e *etcd) identity(ctx context.Context) (string, error) {
	out, err := e.ctl(ctx, nil, "", "member", "list", "-w", "json")
	if err != nil {
		return "", err
	}
	var list struct {
		Members []struct {
			ID         uint64   `json:"ID"`
			Name       string   `json:"name"`
			PeerURLs   []string `json:"peerURLs"`
			ClientURLs []string `json:"clientURLs"`
		} `json:"members"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return "", fmt.Errorf("member list: %w", err)
	}
	var ms []string
	for _, m := range list.Members {
		ms = append(ms, fmt.Sprintf("%s=%x %v %v", m.Name, m.ID, m.PeerURLs, m.ClientURLs))
	}
	sort.Strings(ms)
	if len(ms) != clusterSize {
		return "", fmt.Errorf("member list has %d members: %v", len(ms), ms)
	}
	return strings.Join(ms, "; "), nil
}

// writer puts a key every 200 ms through any member, each with its own
// etcdctl.
func (e *etcd) writer(ctx context.Context, dir string) *writer {
	ctx, cancel := context.WithCancel(ctx)
	wr := &writer{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(wr.done)
		for i := 0; ; i++ {
			k := fmt.Sprintf("%s/w%05d", dir, i)
			if _, err := e.ctl(ctx, nil, "", "put", k, valueOf(k)); err == nil {
				wr.ack(k)
			} else if ctx.Err() == nil {
				wr.mu.Lock()
				wr.failed++
				wr.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				wr.mu.Lock()
				wr.end = time.Now()
				wr.mu.Unlock()
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return wr
}
