package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// buildDemo builds the demo and nodeid-init into a temporary directory.
func buildDemo(t *testing.T) (demo, initBin string) {
	dir := t.TempDir()
	demo, initBin = filepath.Join(dir, "nodeid-demo"), filepath.Join(dir, "nodeid-init")
	for bin, pkg := range map[string]string{demo: ".", initBin: "../nodeid-init"} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, out)
		}
	}
	return demo, initBin
}

// TestDemoEtcd runs `make demo-etcd`'s program: a real etcd cluster with
// the recipe of docs/recipes.md. Without etcd it fails under CI and skips
// otherwise.
func TestDemoEtcd(t *testing.T) {
	for _, tool := range []string{"etcd", "etcdctl"} {
		if _, err := exec.LookPath(tool); err != nil {
			msg := tool + " not found: install the Debian packages etcd-server and etcd-client (make test-tools does, as root)"
			if ci := strings.ToLower(os.Getenv("CI")); ci == "" || ci == "0" || ci == "false" {
				t.Skip("SKIPPED: " + msg)
			}
			t.Fatal(msg)
		}
	}
	demo, initBin := buildDemo(t)
	start := time.Now()
	out, err := exec.Command(demo, "-etcd", "-nodeid-init", initBin, "-recipe", "../../docs/recipes/etcd-member.sh").CombinedOutput()
	if err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out)
	}
	for _, want := range []string{"acquired node 1 version 2 (taken over after expiry)", "from version 1: 0 files copied",
		"1000 of 1000 keys; the same member IDs", "Demo passed."} {
		if !strings.Contains(string(out), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if took := time.Since(start); took > 90*time.Second {
		t.Errorf("demo took %v, more than 90 s", took)
	}
	if lines := strings.Count(string(out), "\n"); lines > 60 {
		t.Errorf("demo printed %d lines, more than a screen", lines)
	}
}

// TestDemo runs `make demo`'s program end to end, so the README's first
// command cannot rot.
func TestDemo(t *testing.T) {
	demo, initBin := buildDemo(t)
	start := time.Now()
	out, err := exec.Command(demo, "-nodeid-init", initBin).CombinedOutput()
	if err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out)
	}
	for _, want := range []string{"acquired node 2 version 2 (taken over after expiry)", "broker killed (SIGKILL)", "Demo passed."} {
		if !strings.Contains(string(out), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if took := time.Since(start); took > 60*time.Second {
		t.Errorf("demo took %v, more than a minute", took)
	}
}
