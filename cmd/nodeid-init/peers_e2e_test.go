package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// peersChildScript reports NODE_PEERS_FILE and NODE_PEERS before the usual
// identity report, so both exist once identity returns.
const peersChildScript = `echo "$NODE_PEERS_FILE" > "$REPORT.file"; echo "$NODE_PEERS" > "$REPORT.peers"; ` + childScript

const votersTemplate = `controller.quorum.voters={{range $i, $p := .Peers}}{{if $i}},{{end}}{{$p.ID}}@{{host $p.Address}}:9093{{end}}
node.id={{.NodeID}}
`

// peersJSON runs `peers --json`.
func (c *cluster) peersJSON(t *testing.T) []nodeid.Peer {
	t.Helper()
	cmd := exec.Command(binary, "peers", "--json")
	cmd.Env = c.env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("peers --json: %v", err)
	}
	var peers []nodeid.Peer
	if err := json.Unmarshal(out, &peers); err != nil {
		t.Fatalf("peers --json is not a JSON array of peers: %v\n%s", err, out)
	}
	return peers
}

// readPeersFile parses a child's peers file; a file that does not parse
// fails the test (it is replaced atomically, so never seen half written).
func readPeersFile(t *testing.T, path string) []nodeid.Peer {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("peers file: %v", err)
	}
	var peers []nodeid.Peer
	if err := json.Unmarshal(b, &peers); err != nil {
		t.Fatalf("peers file %s does not parse: %v\n%s", path, err, b)
	}
	return peers
}

// addresses is the id -> address part of a table, for the held IDs.
func addresses(peers []nodeid.Peer) map[int]string {
	m := map[int]string{}
	for _, p := range peers {
		if p.State == nodeid.PeerHeld {
			m[p.ID] = p.Address
		}
	}
	return m
}

func sameAddresses(a, b map[int]string) bool {
	if len(a) != len(b) {
		return false
	}
	for id, addr := range a {
		if b[id] != addr {
			return false
		}
	}
	return true
}

func votersLine(want map[int]string) string {
	ids := make([]int, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var parts []string
	for _, id := range ids {
		parts = append(parts, fmt.Sprintf("%d@%s:9093", id, strings.Split(want[id], ":")[0]))
	}
	return "controller.quorum.voters=" + strings.Join(parts, ",")
}

func metricValue(t *testing.T, addr, series string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	t.Fatalf("/metrics lacks %s", series)
	return ""
}

// The refresh interval is L = 2 s here, jittered by ±20%: a holder's table
// shows a change at most 2.4 s after it lands, plus one round of reads.
const peersBound = 2400*time.Millisecond + time.Second

func TestPeersTableFollowsATakeover(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 3)
	tmpl := filepath.Join(c.dir, "server.properties.tmpl")
	if err := os.WriteFile(tmpl, []byte(votersTemplate), 0o644); err != nil {
		t.Fatal(err)
	}
	metricsAddr := freeAddr(t)
	type member struct {
		tk        *task
		addr      string
		rendered  string // the template's destination
		peersFile string // NODE_PEERS_FILE as the child saw it
	}
	byID := map[int]*member{}
	idOf := map[string]int{}
	start := func(name, addr string, env ...string) (int, *member) {
		m := &member{addr: addr, rendered: filepath.Join(c.dir, name+".properties")}
		env = append(env, "NODEID_ADVERTISE_ADDRESS="+addr, "NODEID_TEMPLATES="+tmpl+":"+m.rendered)
		m.tk = c.start(name, env, "run", "--", "sh", "-c", peersChildScript)
		id, _, _ := m.tk.identity(t, 20*time.Second)
		b, err := os.ReadFile(m.tk.report + ".file")
		if err != nil {
			t.Fatal(err)
		}
		m.peersFile = strings.TrimSpace(string(b))
		t.Cleanup(func() {
			if !strings.HasPrefix(m.peersFile, c.dir) {
				os.Remove(m.peersFile)
			}
		})
		if byID[id] != nil && byID[id].tk.running() {
			t.Fatalf("%s got node %d, held by %s", name, id, byID[id].tk.name)
		}
		byID[id], idOf[name] = m, id
		return id, m
	}
	start("task-0", "10.0.0.1:9092", "NODEID_PEERS_FILE="+filepath.Join(c.dir, "task-0.peers.json"), "NODEID_METRICS_ADDR="+metricsAddr)
	start("task-1", "10.0.0.2:9092", "NODEID_PEERS_FILE="+filepath.Join(c.dir, "task-1.peers.json"))
	_, last := start("task-2", "broker-2.internal", "NODEID_PEERS_FILE=") // the default path

	want := map[int]string{}
	for id, m := range byID {
		want[id] = m.addr
	}
	if base := filepath.Base(last.peersFile); !strings.HasSuffix(base, "-peers.json") {
		t.Errorf("default NODE_PEERS_FILE %q, want <lease file name>-peers.json beside the lease file", last.peersFile)
	}
	// The last to start saw everyone: in NODE_PEERS, its file and its template.
	b, _ := os.ReadFile(last.tk.report + ".peers")
	var entries []string
	for id := range 3 {
		entries = append(entries, fmt.Sprintf("%d=%s", id, want[id]))
	}
	if got := strings.TrimSpace(string(b)); got != strings.Join(entries, ",") {
		t.Errorf("NODE_PEERS of the last task = %q, want %q", got, strings.Join(entries, ","))
	}
	if r, _ := os.ReadFile(last.rendered); !strings.Contains(string(r), votersLine(want)+"\n") {
		t.Errorf("rendered template:\n%s\nwant the line %s", r, votersLine(want))
	}

	if got := addresses(c.peersJSON(t)); !sameAddresses(got, want) {
		t.Errorf("peers --json: %v, want %v", got, want)
	}
	converged := func(members ...*member) func() bool {
		return func() bool {
			for _, m := range members {
				if !sameAddresses(addresses(readPeersFile(t, m.peersFile)), want) {
					return false
				}
			}
			return sameAddresses(addresses(c.peersJSON(t)), want)
		}
	}
	all := []*member{byID[0], byID[1], byID[2]}
	waitFor(t, peersBound, "every child's peers file to list all three", converged(all...))
	if v := metricValue(t, metricsAddr, "nodeid_peers_without_address"); v != "0" {
		t.Errorf("nodeid_peers_without_address = %s with every ID held", v)
	}
	table := c.peersText(t)
	for _, s := range append([]string{"ID", "ADDRESS", "HOLDER", "STATE"}, want[0], want[1], want[2]) {
		if !strings.Contains(table, s) {
			t.Errorf("peers lacks %q:\n%s", s, table)
		}
	}
	if st := c.status(t, "--json"); !strings.Contains(st, `"address": "`+want[1]+`"`) {
		t.Errorf("status --json lacks node 1's address:\n%s", st)
	}
	if st := c.status(t); !strings.Contains(st, "ADDRESS") || !strings.Contains(st, want[2]) {
		t.Errorf("status lacks the address column:\n%s", st)
	}

	// task-1 dies (task-0 serves the metrics); a spare with another
	// address takes its node ID over.
	victimID := idOf["task-1"]
	victim := byID[victimID]
	if err := victim.tk.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	victim.tk.wait(t, 5*time.Second)
	id, spare := start("spare", "10.0.0.99:9092", "NODEID_PEERS_FILE="+filepath.Join(c.dir, "spare.peers.json"))
	if id != victimID {
		t.Fatalf("spare took node %d, want the dead holder's %d", id, victimID)
	}
	took := time.Now()
	want[victimID] = spare.addr
	if r, _ := os.ReadFile(spare.rendered); !strings.Contains(string(r), votersLine(want)+"\n") {
		t.Errorf("spare's rendered template:\n%s\nwant the line %s", r, votersLine(want))
	}
	waitFor(t, peersBound, "peers --json and every live child's file to show the spare's address", converged(byID[0], byID[1], byID[2]))
	t.Logf("every table showed the new address %v after the takeover", time.Since(took).Round(time.Millisecond))
	if v := metricValue(t, metricsAddr, "nodeid_peers_without_address"); v != "0" {
		t.Errorf("nodeid_peers_without_address = %s after the takeover", v)
	}
}

func (c *cluster) peersText(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(binary, "peers")
	cmd.Env = c.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("peers: %v\n%s", err, out)
	}
	return string(out)
}

// A template that fails only on the real data stops run before the child
// starts: exit 2, the lease released, nothing rendered.
func TestTemplateFailingOnTheRealDataReleasesAndExits2(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 3)
	tmpl := filepath.Join(c.dir, "strict.tmpl")
	// Peers 1 and 2 are not held, so they have no address: the undefined
	// template is executed. The dry run at start has every address.
	if err := os.WriteFile(tmpl, []byte(`{{range .Peers}}{{if not .Address}}{{template "every-peer-needs-an-address"}}{{end}}{{end}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(c.dir, "out.properties")
	tk := c.start("t", []string{"NODEID_ALLOWED_IDS=0", "NODEID_ADVERTISE_ADDRESS=10.0.0.1"}, "run", "--template", tmpl+":"+dst, "--", "sh", "-c", childScript)
	if code := tk.wait(t, 20*time.Second); code != 2 {
		t.Fatalf("exit code %d, want 2", code)
	}
	if !strings.Contains(tk.out.String(), "every-peer-needs-an-address") {
		t.Errorf("the error does not name the failure:\n%s", tk.out.String())
	}
	if _, err := os.Stat(tk.report); err == nil {
		t.Error("the child started although a template failed")
	}
	if _, err := os.Stat(dst); err == nil {
		t.Error("the failed template was written")
	}
	rec, err := c.repo().Get(context.Background(), 0)
	if err != nil || rec.Lease.Held() || rec.Lease.Instance.Version != 1 {
		t.Fatalf("lease after the failed template: %+v %v; want v1 released", rec.Lease, err)
	}
}
