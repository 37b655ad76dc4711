package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// hostile holds shell syntax that must come out of the env file as data.
const hostile = `t1;touch${IFS}PWNED;$(touch${IFS}PWNED)` + "`touch${IFS}PWNED`" + `'"\|&<>*~#!`

func TestEnvFileValuesAreDataForTheShell(t *testing.T) {
	dir := t.TempDir()
	want := map[string]string{
		"NODE_TASK_ID":  hostile,
		"NODE_DATA_DIR": dir + `/a b'c"d $(touch PWNED) ;x/node-0/v1`,
		"NODE_EMPTY":    "",
		"NODE_QUOTES":   `''''`,
		"NODE_UNICODE":  "données – ✓",
	}
	var env []string
	for k, v := range want {
		env = append(env, k+"="+v)
	}
	path := filepath.Join(dir, "node.env")
	if err := os.WriteFile(path, envFileText(env), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `set -a; . ./node.env; env >/dev/null`)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got := sourceEnv(t, path)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "PWNED")); err == nil {
		t.Fatal("sourcing the env file ran a command")
	}
}

// sourceEnv reads an env file the way docs/ecs.md's broker does
// (`set -a; . FILE`) and returns what sh exported, NODE_* only.
func sourceEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	cmd := exec.Command("sh", "-c", `set -a; . "$1"; env -0`, "sh", path)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sourcing %s: %v", path, err)
	}
	env := map[string]string{}
	for _, kv := range strings.Split(string(out), "\x00") {
		if name, value, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(name, "NODE_") {
			env[name] = value
		}
	}
	return env
}
