package main_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
)

// subcommands are the subcommands whose -h output lists their flags, each
// with its NODEID_ variable.
var subcommands = []string{"run", "acquire", "renew", "status", "peers", "bootstrap", "scale", "release", "probe", "health"}

var helps sync.Map // subcommand -> its -h output

// help returns the output of `nodeid-init SUB -h` (the binary TestMain
// built), cached.
func help(sub string) string {
	if h, ok := helps.Load(sub); ok {
		return h.(string)
	}
	out, _ := exec.Command(binary, sub, "-h").CombinedOutput()
	helps.Store(sub, string(out))
	return string(out)
}

// readsEnv reports whether subcommand sub reads the variable v: its -h
// output names it as "(env V)" or "(env V, default ...)".
func readsEnv(sub, v string) bool {
	h := help(sub)
	return strings.Contains(h, "(env "+v+")") || strings.Contains(h, "(env "+v+",")
}

// knownEnv reports whether any subcommand reads the variable v.
func knownEnv(v string) bool {
	for _, sub := range subcommands {
		if readsEnv(sub, v) {
			return true
		}
	}
	return false
}

// TestDocsMatchTheCode keeps README.md and docs/ from rotting: every
// NODEID_ variable they name is one the command reads, every `nodeid-init`
// command line they show uses a real subcommand with flags it accepts, every
// `make` target exists, and every path given to go run, go test or bash
// exists. `make docs-check` runs it.
func TestDocsMatchTheCode(t *testing.T) {
	root := filepath.Join("..", "..")
	files, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	files = append(files, filepath.Join(root, "README.md"))

	all := ""
	for _, sub := range subcommands {
		all += help(sub)
	}
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	testOnly := map[string]bool{"NODEID_TEST_CLOCK_OFFSET": true, "NODEID_VERSITYGW": true, "NODEID_SKIP_INTEGRATION": true,
		// cli.md's naming rule, its unknown-variable example and the
		// test variables it does not warn about.
		"NODEID_FOO_BAR": true, "NODEID_CLUSTERSIZE": true, "NODEID_TEST_": true}
	varRe := regexp.MustCompile(`NODEID_[A-Z0-9_]+`)
	cmdRe := regexp.MustCompile(`(?:^|[\s$(])nodeid-init ([a-z]+)((?: +--?[a-z][a-z0-9-]*(?:[ =][^ -][^ ]*)?)*)`)
	flagRe := regexp.MustCompile(`--?([a-z][a-z0-9-]*)`)
	makeRe := regexp.MustCompile(`(?m)^\s*make ([a-z][a-z0-9-]*)`)
	pathRe := regexp.MustCompile(`(?m)^\s*(?:(?:go run|go test|bash) (\./[^ ]+|scripts/[^ ]+)|(chaos/[a-z0-9-]+)\s)`)
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		name := filepath.Base(f)
		for _, v := range varRe.FindAllString(text, -1) {
			checked++
			if !testOnly[v] && !strings.Contains(all, "env "+v) {
				t.Errorf("%s names %s, which no subcommand reads", name, v)
			}
		}
		for _, block := range codeBlocks(text) {
			for _, line := range strings.Split(block, "\n") {
				for _, m := range cmdRe.FindAllStringSubmatch(line, -1) {
					sub := m[1]
					if sub == "version" || sub == "help" {
						continue
					}
					h := help(sub)
					if !strings.HasPrefix(h, "usage: nodeid-init "+sub) {
						t.Errorf("%s: %q: no subcommand %q", name, strings.TrimSpace(line), sub)
						continue
					}
					for _, fm := range flagRe.FindAllStringSubmatch(m[2], -1) {
						checked++
						if fm[1] != "h" && !strings.Contains(h, "  -"+fm[1]+" ") && !strings.Contains(h, "  -"+fm[1]+"\n") {
							t.Errorf("%s: %q: %s does not accept --%s", name, strings.TrimSpace(line), sub, fm[1])
						}
					}
				}
			}
			for _, m := range makeRe.FindAllStringSubmatch(block, -1) {
				checked++
				if !regexp.MustCompile("(?m)^" + regexp.QuoteMeta(m[1]) + ":").Match(makefile) {
					t.Errorf("%s: make %s: no such target", name, m[1])
				}
			}
			for _, m := range pathRe.FindAllStringSubmatch(block, -1) {
				checked++
				p := strings.TrimSuffix(m[1]+m[2], "/...")
				if _, err := os.Stat(filepath.Join(root, p)); err != nil {
					t.Errorf("%s: %s does not exist", name, m[1])
				}
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d references checked: the patterns no longer match the docs", checked)
	}
	t.Logf("%d references in %d files checked", checked, len(files))
}

// codeBlocks returns the contents of the fenced code blocks of a Markdown text.
func codeBlocks(md string) []string {
	var out []string
	parts := strings.Split(md, "```")
	for i := 1; i < len(parts); i += 2 {
		out = append(out, parts[i])
	}
	return out
}

// kafkaBlocks returns the code blocks of docs/NAME that contain all of subs.
func kafkaBlocks(t *testing.T, name string, subs ...string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", name))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
blocks:
	for _, block := range codeBlocks(string(b)) {
		for _, s := range subs {
			if !strings.Contains(block, s) {
				continue blocks
			}
		}
		// Drop the info string (sh, json) of the fence.
		_, body, _ := strings.Cut(block, "\n")
		out = append(out, body)
	}
	return out
}

// emptyHost is a controller entry without a host: an ID nobody holds
// rendered as ":9093".
var emptyHost = regexp.MustCompile(`(^|[=,@ ]):9093`)

// The Kafka templates of the docs (cli.md's example, peers.md's
// server.properties), rendered by nodeid-init run while only node 1 of 3
// is held: no static voter list, no entry for an ID nobody holds, and
// rendered again, while the command runs, when node 0 gets a holder.
func TestDocsKafkaTemplatesRenderHeldPeersOnly(t *testing.T) {
	tmpls := append(kafkaBlocks(t, "cli.md", "controller.quorum", "{{"), kafkaBlocks(t, "peers.md", "controller.quorum", "{{")...)
	if len(tmpls) != 2 {
		t.Fatalf("found %d Kafka templates in cli.md and peers.md, want 2", len(tmpls))
	}
	c := newCluster(t, s3test.NewFake(t), 3)
	var srcs []string
	for i, tmpl := range tmpls {
		if strings.Contains(tmpl, "controller.quorum.voters") {
			t.Errorf("template %d builds a static voter list from the peers table:\n%s", i, tmpl)
		}
		srcs = append(srcs, filepath.Join(c.dir, fmt.Sprintf("kafka%d.tmpl", i)))
		if err := os.WriteFile(srcs[i], []byte(tmpl), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// env is a task's environment: its own destinations, returned too.
	env := func(name string) ([]string, []string) {
		var specs, dsts []string
		for i, src := range srcs {
			dsts = append(dsts, filepath.Join(c.dir, fmt.Sprintf("%s-kafka%d.properties", name, i)))
			specs = append(specs, src+":"+dsts[i])
		}
		return []string{"NODEID_TEMPLATE=" + strings.Join(specs, ","), "NODEID_PEERS_FILE="}, dsts
	}
	env1, rendered := env("node-1")
	one := c.runTask("node-1", append(env1, "NODEID_ALLOWED_IDS=1", "NODEID_ADVERTISE_ADDRESS=10.0.0.1:9092")...)
	one.identity(t, 20*time.Second)
	for i, f := range rendered {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, line := range strings.Split(text, "\n") {
			if strings.Contains(line, "controller") && (emptyHost.MatchString(line) || strings.Contains(line, ",,") || strings.HasSuffix(line, ",")) {
				t.Errorf("template %d, only node 1 held: %q lists an ID nobody holds", i, line)
			}
		}
		if !strings.Contains(text, "controller.quorum.bootstrap.servers=10.0.0.1:9093\n") {
			t.Errorf("template %d, only node 1 held: want bootstrap servers 10.0.0.1:9093 alone:\n%s", i, text)
		}
	}
	env0, _ := env("node-0")
	zero := c.runTask("node-0", append(env0, "NODEID_ALLOWED_IDS=0", "NODEID_ADVERTISE_ADDRESS=10.0.0.2:9092")...)
	zero.identity(t, 20*time.Second)
	waitFor(t, peersBound, "node 1's files to be rendered again with node 0", func() bool {
		for _, f := range rendered {
			if b, _ := os.ReadFile(f); !strings.Contains(string(b), "controller.quorum.bootstrap.servers=10.0.0.2:9093,10.0.0.1:9093\n") {
				return false
			}
		}
		return true
	})
	if b, _ := os.ReadFile(rendered[1]); !strings.Contains(string(b), "# other.controllers=0@10.0.0.2:9093\n") {
		t.Errorf("peers.md's template on node 1 does not list node 0 for start.sh:\n%s", b)
	}
}

// peers.md's start.sh, run with stand-ins for Kafka's scripts: the storage
// format follows the data directory (meta.properties), not NODE_VERSION; a
// first tenure used up without Kafka starting (version 2, empty
// directory) still bootstraps the quorum on node 0; node 0 joins a quorum
// that answers instead of starting a second one; others join as observers.
func TestDocsKafkaStartScriptKeysTheFormatOnTheDataDirectory(t *testing.T) {
	scripts := kafkaBlocks(t, "peers.md", "kafka-storage.sh format")
	if len(scripts) != 1 {
		t.Fatalf("found %d Kafka start scripts in peers.md, want 1", len(scripts))
	}
	script := scripts[0]
	for _, name := range []string{"peers.md", "ecs.md"} {
		for _, b := range kafkaBlocks(t, name, "kafka-server-start.sh") {
			if strings.Contains(b, "NODE_VERSION") {
				t.Errorf("%s: the Kafka recipe keys on NODE_VERSION:\n%s", name, b)
			}
		}
	}
	const P, K = "P=/tmp/kafka/server.properties", "K=/opt/kafka/bin"
	if !strings.Contains(script, P) || !strings.Contains(script, K) {
		t.Fatalf("start.sh does not set %s and %s:\n%s", P, K, script)
	}
	cases := []struct {
		name      string
		id, ver   string
		formatted bool
		others    string // the rendered # other.controllers line's value
		quorum    bool   // kafka-metadata-quorum.sh answers
		want      string // the format's arguments, "" for none
	}{
		{"node 0's first tenure used up before Kafka started", "0", "2", false, "", false, "format --cluster-id C --standalone"},
		{"node 0, others held, no quorum yet", "0", "1", false, "1@10.0.0.1:9093", false, "format --cluster-id C --standalone"},
		{"node 0 whose data was lost, quorum running", "0", "5", false, "1@10.0.0.1:9093,2@10.0.0.3:9093", true, "format --cluster-id C --no-initial-controllers"},
		{"node 1, never formatted, node 0 held", "1", "1", false, "0@10.0.0.2:9093", false, "format --cluster-id C --no-initial-controllers"},
		{"node 0, formatted at version 1, restarted", "0", "1", true, "1@10.0.0.1:9093", true, ""},
		{"node 2, formatted", "2", "7", true, "0@10.0.0.2:9093", true, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bin, data := filepath.Join(dir, "bin"), filepath.Join(dir, "data")
			for _, d := range []string{bin, filepath.Join(data, "kafka")} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if tc.formatted {
				if err := os.WriteFile(filepath.Join(data, "kafka", "meta.properties"), []byte("node.id="+tc.id+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			quorumExit := "1"
			if tc.quorum {
				quorumExit = "0"
			}
			log := filepath.Join(dir, "calls")
			for name, body := range map[string]string{
				"kafka-storage.sh":         `echo "$1 $2 $3 $4" >> ` + log,
				"kafka-metadata-quorum.sh": `echo "quorum $*" >> ` + log + `; exit ` + quorumExit,
				"kafka-server-start.sh":    `echo started >> ` + log,
			} {
				if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			props := filepath.Join(dir, "server.properties")
			if err := os.WriteFile(props, []byte("node.id="+tc.id+"\n# other.controllers="+tc.others+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			s := strings.Replace(strings.Replace(script, P, "P="+props, 1), K, "K="+bin, 1)
			cmd := exec.Command("sh", "-c", s)
			cmd.Env = append(os.Environ(), "NODE_ID="+tc.id, "NODE_VERSION="+tc.ver, "NODE_DATA_DIR="+data, "KAFKA_CLUSTER_ID=C")
			done := make(chan error, 1)
			go func() { out, err := cmd.CombinedOutput(); done <- fmtErr(err, out) }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatal("start.sh still waiting after 20 s")
			}
			b, _ := os.ReadFile(log)
			var format string
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				if strings.HasPrefix(line, "format") {
					format = line
				}
			}
			if format != tc.want {
				t.Errorf("format call %q, want %q (calls: %q)", format, tc.want, b)
			}
			if !strings.HasSuffix(strings.TrimSpace(string(b)), "started") {
				t.Errorf("Kafka not started last (calls: %q)", b)
			}
		})
	}
}

func fmtErr(err error, out []byte) error {
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}
