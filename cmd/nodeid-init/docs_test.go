package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
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
