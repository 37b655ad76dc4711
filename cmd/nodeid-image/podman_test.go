package main

import (
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// TestPodmanLoadsAndRunsTheImage loads the tar with podman load and runs
// the image on this machine's platform, as a user would. It needs podman
// (Debian: apt-get install podman), which CI does not install (see
// docs/image.md): it skips without it.
func TestPodmanLoadsAndRunsTheImage(t *testing.T) {
	podman, err := exec.LookPath("podman")
	if err != nil {
		t.Skip("podman is not installed (apt-get install podman); the image's contents are checked by TestImage")
	}
	_, tarPath, _ := imageForTest(t)
	// PODMAN_FLAGS e.g. "--storage-driver vfs" where overlay does not work.
	pm := func(args ...string) (string, error) {
		out, err := exec.Command(podman, append(strings.Fields(os.Getenv("PODMAN_FLAGS")), args...)...).CombinedOutput()
		return string(out), err
	}
	out, err := pm("load", "-i", tarPath)
	if err != nil {
		t.Fatalf("podman load: %v\n%s", err, out)
	}
	t.Logf("podman load:\n%s", out)
	ref := ""
	if m := regexp.MustCompile(`(?m)^Loaded image(?:\(s\))?: *(\S+)`).FindStringSubmatch(out); m != nil {
		ref = strings.Split(m[1], ",")[0]
	}
	if ref == "" {
		t.Fatalf("podman load named no image:\n%s", out)
	}
	t.Cleanup(func() { pm("rmi", "-f", ref) })
	// From the OCI index: podman picks this machine's platform.
	if want := "localhost/nodeid-init:" + testTag; ref != want {
		t.Errorf("podman load named the image %q, want %q", ref, want)
	}
	out, err = pm("image", "inspect", "--format", "{{.Config.User}} {{.Os}}/{{.Architecture}}", ref)
	if want := "65532:65532 linux/" + runtime.GOARCH; err != nil || strings.TrimSpace(out) != want {
		t.Errorf("podman image inspect: %v: %q, want %q", err, out, want)
	}

	out, err = pm("run", "--rm", ref, "version")
	if err != nil && strings.Contains(out, "setrlimit") {
		// A sandbox without CAP_SYS_RESOURCE: crun cannot set the rlimits.
		t.Skipf("podman load and inspect passed; podman run cannot start a container on this machine: %s", strings.TrimSpace(out))
	}
	if err != nil || !strings.HasPrefix(out, "nodeid-init "+testVersion+" ") {
		t.Fatalf("podman run %s version: %v: %q", ref, err, out)
	}
	out, err = pm("run", "--rm", ref)
	if err != nil || !strings.Contains(out, "usage: nodeid-init") {
		t.Errorf("podman run (default --help): %v: %q", err, out)
	}
}
