package camunda

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed" // the Java source is compiled on demand
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

//go:embed jackson/StrictCheck.java
var strictCheckSource []byte

// The Debian jars (package libjackson2-databind-java).
var jacksonJars = []string{
	"/usr/share/java/jackson-databind.jar",
	"/usr/share/java/jackson-core.jar",
	"/usr/share/java/jackson-annotations.jar",
}

// Object is one input of JacksonCheck: a lease object or a directory
// marker.
type Object struct {
	Marker bool // a directory-initialized.json rather than a lease
	Body   []byte
	Meta   map[string]string // the lease's user metadata; nil for none
}

// LeaseObject is a lease object for JacksonCheck.
func LeaseObject(body []byte, meta map[string]string) Object {
	return Object{Body: body, Meta: meta}
}

// MarkerObject is a directory marker for JacksonCheck.
func MarkerObject(body []byte) Object { return Object{Marker: true, Body: body} }

var compiled struct {
	once sync.Once
	dir  string
	skip string
	err  error
}

// JacksonCheck reads objs with the real Jackson parser (jackson/
// StrictCheck.java, compiled with javac once per test binary and cached in
// the temporary directory by the hash of its source) and returns one line
// per object: the String form of Stored or DirInfo, or "ERROR ..." where
// Camunda would throw.
//
// Without java, javac or the Jackson jars the test is skipped, except when
// the CI environment variable is true: integration checks must run there,
// so the test fails instead.
func JacksonCheck(t testing.TB, objs ...Object) []string {
	t.Helper()
	compiled.once.Do(compile)
	if compiled.skip != "" {
		if inCI() {
			t.Fatalf("camunda: %s (CI is set, so the Jackson check may not be skipped)", compiled.skip)
		}
		t.Skip("camunda: " + compiled.skip)
	}
	if compiled.err != nil {
		t.Fatalf("camunda: %v", compiled.err)
	}

	dir := t.TempDir()
	var args []string
	for i, o := range objs {
		body := filepath.Join(dir, strconv.Itoa(i)+".body")
		if err := os.WriteFile(body, o.Body, 0o600); err != nil {
			t.Fatal(err)
		}
		if o.Marker {
			args = append(args, "dir", body)
			continue
		}
		meta := o.Meta
		if meta == nil {
			meta = map[string]string{}
		}
		mj, err := json.Marshal(meta)
		if err != nil {
			t.Fatal(err)
		}
		mf := filepath.Join(dir, strconv.Itoa(i)+".meta")
		if err := os.WriteFile(mf, mj, 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "lease", body, mf)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "java", append([]string{"-cp", classpath(compiled.dir), "StrictCheck"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("camunda: java StrictCheck: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(objs) == 0 {
		lines = nil
	}
	if len(lines) != len(objs) {
		t.Fatalf("camunda: StrictCheck printed %d lines for %d objects:\n%s", len(lines), len(objs), out)
	}
	return lines
}

func classpath(dir string) string {
	return strings.Join(append([]string{dir}, jacksonJars...), string(os.PathListSeparator))
}

// compile fills compiled: the directory with StrictCheck.class, a reason to
// skip, or an error.
func compile() {
	for _, tool := range []string{"java", "javac"} {
		if _, err := exec.LookPath(tool); err != nil {
			compiled.skip = tool + " not found (install default-jdk-headless)"
			return
		}
	}
	for _, jar := range jacksonJars {
		if _, err := os.Stat(jar); err != nil {
			compiled.skip = jar + " not found (install libjackson2-databind-java)"
			return
		}
	}
	sum := sha256.Sum256(strictCheckSource)
	dir := filepath.Join(os.TempDir(), "nodeid-camunda-strictcheck-"+hex.EncodeToString(sum[:8]))
	if _, err := os.Stat(filepath.Join(dir, "StrictCheck.class")); err == nil {
		compiled.dir = dir
		return
	}
	// Compile into a fresh directory and rename it into place, so that
	// concurrent test binaries never see a half-written cache.
	tmp, err := os.MkdirTemp(os.TempDir(), "nodeid-camunda-javac-")
	if err != nil {
		compiled.err = err
		return
	}
	defer os.RemoveAll(tmp)
	src := filepath.Join(tmp, "StrictCheck.java")
	if err := os.WriteFile(src, strictCheckSource, 0o600); err != nil {
		compiled.err = err
		return
	}
	classes := filepath.Join(tmp, "classes")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "javac", "-d", classes, "-cp", strings.Join(jacksonJars, string(os.PathListSeparator)), src).CombinedOutput()
	if err != nil {
		compiled.err = fmt.Errorf("javac StrictCheck.java: %w\n%s", err, out)
		return
	}
	if err := os.Rename(classes, dir); err != nil && !errors.Is(err, os.ErrExist) {
		if _, statErr := os.Stat(filepath.Join(dir, "StrictCheck.class")); statErr != nil {
			compiled.err = fmt.Errorf("install compiled StrictCheck: %w", err)
			return
		}
	}
	compiled.dir = dir
}

// inCI reports whether the CI environment variable asks for mandatory
// integration checks (as internal/s3test does): any value other than
// empty, "0" or "false".
func inCI() bool {
	switch strings.ToLower(os.Getenv("CI")) {
	case "", "0", "false":
		return false
	}
	return true
}
