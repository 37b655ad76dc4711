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
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestReleaseBuild runs `make release` (scripts/build.sh, the flags every
// build uses) for one architecture into a temporary directory and checks
// that the binary is static, built with -trimpath, stamped with the VERSION
// file's version, named after it, and listed in SHA256SUMS. It builds the host's architecture when that is linux/amd64 or
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
	// The version is the VERSION file's (make's default), the commit a
	// string found nowhere else in the binary.
	ver, commit := versionFile(t), "0123456789ab"
	dist := t.TempDir()
	cmd := exec.Command("make", "-C", root, "release", "DIST="+dist, "RELEASE_ARCHES="+arch, "COMMIT="+commit)
	cmd.Env = envWithout("VERSION", "MAKEFLAGS", "MFLAGS")
	out, err := cmd.CombinedOutput()
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

// versionFile returns the VERSION file at the repository root, which
// scripts/build.sh stamps by default: one line, MAJOR.MINOR.PATCH.
func versionFile(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	v := strings.TrimSuffix(string(b), "\n")
	if !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(v) {
		t.Fatalf("VERSION is %q, want one line MAJOR.MINOR.PATCH", b)
	}
	return v
}

// envWithout is the environment without the variables names.
func envWithout(names ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(names, k) {
			env = append(env, kv)
		}
	}
	return env
}

// The version scripts/build.sh stamps by default is the VERSION file's,
// whatever git's tags say, and CHANGELOG.md has an entry for it.
func TestDefaultVersionIsTheVERSIONFile(t *testing.T) {
	root := filepath.Join("..", "..")
	want := versionFile(t)
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "build.sh"), "--version")
	cmd.Env = append(os.Environ(), "VERSION=") // empty counts as unset
	got, err := cmd.Output()
	if err != nil || string(got) != want+"\n" {
		t.Errorf("scripts/build.sh --version: %q (%v), want %q", got, err, want+"\n")
	}
	cmd = exec.Command("bash", filepath.Join(root, "scripts", "build.sh"), "--version")
	cmd.Env = append(os.Environ(), "VERSION=9.9.9-env")
	if got, err := cmd.Output(); err != nil || string(got) != "9.9.9-env\n" {
		t.Errorf("VERSION=9.9.9-env scripts/build.sh --version: %q (%v): the environment should win", got, err)
	}
	changelog, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^## \[` + regexp.QuoteMeta(want) + `\] - [0-9]{4}-[0-9]{2}-[0-9]{2}$`).Match(changelog) {
		t.Errorf("CHANGELOG.md has no line \"## [%s] - YYYY-MM-DD\"", want)
	}
}

// make release and make image, without VERSION in the environment, name
// their artifacts after the VERSION file (make -n: printed, not run).
func TestMakeUsesTheVERSIONFile(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	want := versionFile(t)
	for target, wants := range map[string][]string{
		"release": {"dist/nodeid-init-" + want + "-linux-$arch linux $arch", "sha256sum nodeid-init-" + want + "-linux-* > SHA256SUMS"},
		"image":   {"VERSION=" + want + " ", "-version " + want + " "},
	} {
		cmd := exec.Command("make", "-n", "-C", filepath.Join("..", ".."), target, "RELEASE_ARCHES=amd64")
		cmd.Env = envWithout("VERSION", "COMMIT", "MAKEFLAGS", "MFLAGS")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make -n %s: %v\n%s", target, err, out)
		}
		for _, w := range wants {
			if !strings.Contains(string(out), w) {
				t.Errorf("make -n %s does not show %q:\n%s", target, w, out)
			}
		}
	}
}

// make without a target only builds (nothing installed, no test run), and
// make demo compiles only nodeid-init and the demo, not every package
// (make -n: printed, not run).
func TestMakeDefaultAndDemoOnlyBuild(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	dryRun := func(target ...string) string {
		t.Helper()
		cmd := exec.Command("make", append([]string{"-n", "-C", filepath.Join("..", "..")}, target...)...)
		cmd.Env = envWithout("GO", "MAKEFLAGS", "MFLAGS")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make -n %v: %v\n%s", target, err, out)
		}
		return string(out)
	}
	for name, c := range map[string]struct {
		out       string
		want, not []string
	}{
		"make":      {dryRun(), []string{"go build ./...", "scripts/build.sh bin/nodeid-init"}, []string{"go test", "go install", "apt-get", "versitygw"}},
		"make demo": {dryRun("demo"), []string{"scripts/build.sh bin/nodeid-init", "go run ./cmd/nodeid-demo -nodeid-init bin/nodeid-init"}, []string{"go build ./...", "go test", "go install", "apt-get"}},
	} {
		for _, w := range c.want {
			if !strings.Contains(c.out, w) {
				t.Errorf("%s -n does not show %q:\n%s", name, w, c.out)
			}
		}
		for _, w := range c.not {
			if strings.Contains(c.out, w) {
				t.Errorf("%s -n shows %q:\n%s", name, w, c.out)
			}
		}
	}
}
