package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nodeidinit "github.com/nodeid/nodeid/cmd/nodeid-init"
	"github.com/nodeid/nodeid/internal/s3test"
)

// sourceEnvFile reads an env file the way docs/ecs.md's broker does
// (`set -a; . FILE`) and returns what sh exported, NODE_* only.
func sourceEnvFile(t *testing.T, path string) map[string]string {
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

// hostileValue holds shell syntax that must come out of the env file as
// data: TestEnvFileValuesAreDataForTheShell writes it with the command's own
// envFileText.
const hostileValue = `t1;touch${IFS}PWNED;$(touch${IFS}PWNED)` + "`touch${IFS}PWNED`" + `'"\|&<>*~#!`

func TestEnvFileValuesAreDataForTheShell(t *testing.T) {
	dir := t.TempDir()
	want := map[string]string{
		"NODE_TASK_ID":  hostileValue,
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
	if err := os.WriteFile(path, nodeidinit.EnvFileText(env), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `set -a; . ./node.env; env >/dev/null`)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got := sourceEnvFile(t, path)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "PWNED")); err == nil {
		t.Fatal("sourcing the env file ran a command")
	}
}

// The real acquire, with a data root and an env file path full of shell
// syntax: every variable arrives intact and nothing runs. (A task ID with
// shell syntax is refused: TestTaskIDWithShellSyntaxIsRefused.)
func TestAcquireEnvFileWithHostileValues(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 1)
	work := t.TempDir()
	root := filepath.Join(t.TempDir(), `data root 'x' "y" $(touch PWNED);z`)
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	envFile := filepath.Join(t.TempDir(), `env dir 'q'`, "node.env")
	if err := os.Mkdir(filepath.Dir(envFile), 0o755); err != nil {
		t.Fatal(err)
	}
	const taskID = "arn:aws:ecs:eu-west-1:123456789012:task/my_cluster/0123abcd"
	tk := c.start(taskID, []string{"NODEID_DATA_ROOT=" + root, "NODEID_ENV_FILE=" + envFile}, "acquire")
	if code := tk.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("acquire exited %d:\n%s", code, tk.out.String())
	}
	cmd := exec.Command("sh", "-c", `set -a && . "$1" && test -n "$NODE_DATA_DIR"`, "sh", envFile)
	cmd.Dir = work
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sourcing the env file: %v %s", err, out)
	}
	got := sourceEnvFile(t, envFile)
	want := map[string]string{"NODE_ID": "0", "NODE_VERSION": "1", "NODE_CLUSTER_SIZE": "1", "NODE_PREVIOUS_GRACEFUL": "true",
		"NODE_TASK_ID": taskID, "NODE_DATA_DIR": filepath.Join(root, "node-0", "v1"),
		"NODE_HANDOFF_FILE": filepath.Join(filepath.Dir(envFile), "nodeid-handoff.json")}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("env file exports %v, want exactly %v", got, want)
	}
	if _, err := os.Stat(filepath.Join(work, "PWNED")); err == nil {
		t.Fatal("sourcing the env file ran a command")
	}
	// renew reads the hand-off beside the quoted env file's path.
	sidecar := c.start(taskID, []string{"NODEID_ENV_FILE=" + envFile, "NODEID_TASK_ID="}, "renew")
	time.Sleep(3 * time.Second) // longer than the 2s lease
	if !sidecar.running() {
		t.Fatalf("renew exited %d:\n%s", sidecar.code, sidecar.out.String())
	}
}

// Control characters in a task ID or a path are refused with exit 2 before
// anything is written.
func TestControlCharactersAreRefused(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 1)
	dir := t.TempDir()
	nl := filepath.Join(dir, "a\nNODE_ID=7")
	if err := os.Mkdir(nl, 0o755); err != nil {
		t.Fatal(err)
	}
	envFile := filepath.Join(dir, "node.env")
	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{"task id", []string{"NODEID_TASK_ID=t1\nNODE_ID=7", "NODEID_ENV_FILE=" + envFile}, []string{"acquire"}},
		{"task id tab", []string{"NODEID_TASK_ID=t1\tx", "NODEID_ENV_FILE=" + envFile}, []string{"acquire"}},
		{"data root", []string{"NODEID_DATA_ROOT=" + nl, "NODEID_ENV_FILE=" + envFile}, []string{"acquire"}},
		{"env file", []string{"NODEID_ENV_FILE=" + filepath.Join(dir, "node\r.env")}, []string{"acquire"}},
		{"hand-off file", []string{"NODEID_ENV_FILE=" + envFile, "NODEID_HANDOFF_FILE=" + filepath.Join(dir, "h\x1b.json")}, []string{"acquire"}},
		{"lease file", []string{"NODEID_ENV_FILE=" + envFile, "NODEID_LEASE_FILE=" + filepath.Join(dir, "l\n.json")}, []string{"acquire"}},
		{"run lease file", []string{"NODEID_LEASE_FILE=" + filepath.Join(dir, "l\n.json")}, []string{"run", "--", "true"}},
		{"run peers file", []string{"NODEID_PEERS_FILE=" + filepath.Join(dir, "p\x7f.json")}, []string{"run", "--", "true"}},
		{"run data root", []string{"NODEID_DATA_ROOT=" + nl}, []string{"run", "--", "true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk := c.start("t", tc.env, tc.args...)
			if code := tk.wait(t, 20*time.Second); code != 2 {
				t.Fatalf("exit %d, want 2:\n%s", code, tk.out.String())
			}
			if out := strings.TrimSpace(tk.out.String()); strings.Count(out, "\n") != 0 {
				t.Errorf("want one line:\n%s", out)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Errorf("files written: %v", entries)
			}
			if entries, err := os.ReadDir(nl); err != nil || len(entries) != 0 {
				t.Errorf("data root written: %v %v", entries, err)
			}
			if rec, err := c.repo().Get(t.Context(), 0); err == nil && rec.Lease.Held() {
				t.Errorf("lease taken: %+v", rec.Lease)
			}
		})
	}
}
