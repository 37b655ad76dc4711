package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunnerScripts keeps scripts/chaos in step with the registry: each
// script is executable and runs the experiment it is named after, and every
// experiment has one (docs/chaos.md tells operators to run
// scripts/chaos/<name>).
func TestRunnerScripts(t *testing.T) {
	dir := filepath.Join("..", "scripts", "chaos")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	scripts := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		scripts[name] = true
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&0o111 == 0 {
			t.Errorf("scripts/chaos/%s is not executable", name)
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "go run ./chaos/cmd/chaos -run "+name+" ") {
			t.Errorf("scripts/chaos/%s does not run experiment %s", name, name)
		}
		if _, ok := Lookup(name); !ok {
			t.Errorf("scripts/chaos/%s: no experiment %q", name, name)
		}
	}
	for _, e := range Experiments() {
		if !scripts[e.Name] {
			t.Errorf("experiment %s has no runner script scripts/chaos/%s", e.Name, e.Name)
		}
	}
}
