package main_test

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// TestReleaseBuild runs `make release` (scripts/build.sh, the flags every
// build uses) for one architecture into a temporary directory and checks
// that the binary is static, built with -trimpath, stamped, and listed in
// SHA256SUMS. It builds the host's architecture when that is linux/amd64 or
// linux/arm64 (and then runs the binary), else linux/amd64.
func TestReleaseBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a release binary")
	}
	for _, tool := range []string{"make", "sha256sum"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	arch, native := "amd64", runtime.GOOS == "linux" && (runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64")
	if native {
		arch = runtime.GOARCH
	}
	const ver, commit = "v0.0.0-releasetest", "0123456789ab"
	dist := t.TempDir()
	out, err := exec.Command("make", "-C", root, "release", "DIST="+dist, "RELEASE_ARCHES="+arch,
		"VERSION="+ver, "COMMIT="+commit).CombinedOutput()
	if err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
	name := "nodeid-init-" + ver + "-linux-" + arch
	bin := filepath.Join(dist, name)

	// Static: no program interpreter, no shared libraries.
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]; f.Machine != want {
		t.Errorf("ELF machine %v, want %v", f.Machine, want)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a PT_INTERP header: dynamically linked", name)
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("%s needs shared libraries %v (%v)", name, libs, err)
	}

	// The flags, as the Go toolchain recorded them.
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	for k, v := range map[string]string{"CGO_ENABLED": "0", "-trimpath": "true", "GOOS": "linux", "GOARCH": arch} {
		if settings[k] != v {
			t.Errorf("build setting %s = %q, want %q", k, settings[k], v)
		}
	}
	// Go records no -ldflags with -trimpath: look for the stamped strings
	// (and run the binary below when it is native).
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{ver, commit} {
		if !bytes.Contains(b, []byte(s)) {
			t.Errorf("%s does not contain %q: not stamped", name, s)
		}
	}
	if bytes.Contains(b, []byte(filepath.Join(root, "cmd", "nodeid-init"))) {
		t.Errorf("%s contains the source path %s: not built with -trimpath", name, root)
	}

	// SHA256SUMS: one line in sha256sum's format.
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%x  %s\n", sha256.Sum256(b), name); string(sums) != want {
		t.Errorf("SHA256SUMS:\n%s\nwant:\n%s", sums, want)
	}

	if !native {
		t.Logf("built linux/%s; not run on %s/%s", arch, runtime.GOOS, runtime.GOARCH)
		return
	}
	for _, arg := range []string{"version", "--version"} {
		out, err := exec.Command(bin, arg).Output()
		want := "nodeid-init " + ver + " " + commit + " (" + bi.GoVersion + " linux/" + arch + ")\n"
		if err != nil || string(out) != want {
			t.Errorf("%s %s: %q (%v), want %q", name, arg, out, err, want)
		}
	}
}

// The version make stamps by default is git's description of the tree.
func TestDefaultVersionIsGitDescribe(t *testing.T) {
	root := filepath.Join("..", "..")
	git := exec.Command("git", "describe", "--tags", "--always", "--dirty")
	git.Dir = root
	want, err := git.Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "build.sh"), "--version")
	cmd.Env = append(os.Environ(), "VERSION=")
	got, err := cmd.Output()
	if err != nil || string(got) != string(want) {
		t.Errorf("scripts/build.sh --version: %q (%v), want %q", got, err, want)
	}
}
