package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDemo runs `make demo`'s program end to end, so the README's first
// command cannot rot.
func TestDemo(t *testing.T) {
	dir := t.TempDir()
	demo, initBin := filepath.Join(dir, "nodeid-demo"), filepath.Join(dir, "nodeid-init")
	for bin, pkg := range map[string]string{demo: ".", initBin: "../nodeid-init"} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, out)
		}
	}
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
