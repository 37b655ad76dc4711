package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	testVersion  = "v9.8.7-test+dirty" // '+' is not allowed in a tag
	testTag      = "v9.8.7-test-dirty"
	testRevision = "0123456789abcdef0123456789abcdef01234567"
	testEpoch    = 1700000000
)

var (
	builtOnce sync.Once
	built     struct {
		dir, layout, tar, tool string
		args                   []string
		err                    error
	}
)

// imageForTest builds both binaries with scripts/build.sh (as make image
// does) and the image once per test binary; GOCACHE makes later runs fast.
func imageForTest(t *testing.T) (layoutDir, tarPath string, args []string) {
	t.Helper()
	builtOnce.Do(func() {
		dir, err := os.MkdirTemp("", "nodeid-image-test-")
		if err != nil {
			built.err = err
			return
		}
		built.dir = dir
		start := time.Now()
		built.args = []string{"-version", testVersion, "-revision", testRevision}
		for _, arch := range []string{"amd64", "arm64"} {
			out := filepath.Join(dir, "linux-"+arch, "nodeid-init")
			cmd := exec.Command("bash", filepath.Join("..", "..", "scripts", "build.sh"), out, "linux", arch)
			cmd.Env = append(os.Environ(), "VERSION="+testVersion, "COMMIT="+testRevision)
			if b, err := cmd.CombinedOutput(); err != nil {
				built.err = &buildError{"build linux/" + arch, err, b}
				return
			}
			built.args = append(built.args, "-bin", "linux/"+arch+"="+out)
		}
		// The tool as its own process: in this test binary, -race would make
		// its gzip a minute slower.
		built.tool = filepath.Join(dir, "nodeid-image")
		if b, err := exec.Command("go", "build", "-o", built.tool, ".").CombinedOutput(); err != nil {
			built.err = &buildError{"build nodeid-image", err, b}
			return
		}
		t.Logf("binaries built in %v", time.Since(start).Round(time.Millisecond))
		start = time.Now()
		built.layout, built.tar = filepath.Join(dir, "oci"), filepath.Join(dir, "image.tar")
		built.err = runTool(append(built.args, "-layout", built.layout, "-tar", built.tar)...)
		t.Logf("image written in %v", time.Since(start).Round(time.Millisecond))
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.layout, built.tar, built.args
}

// runTool runs the nodeid-image built by imageForTest.
func runTool(args ...string) error {
	if b, err := exec.Command(built.tool, args...).CombinedOutput(); err != nil {
		return &buildError{"nodeid-image", err, b}
	}
	return nil
}

type buildError struct {
	what string
	err  error
	out  []byte
}

func (e *buildError) Error() string {
	return e.what + ": " + e.err.Error() + "\n" + string(e.out)
}

func TestMain(m *testing.M) {
	os.Setenv("SOURCE_DATE_EPOCH", strconv.Itoa(testEpoch))
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

func TestImage(t *testing.T) {
	layoutDir, tarPath, args := imageForTest(t)

	top, err := layout.ImageIndexFromPath(layoutDir)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 || tm.Manifests[0].MediaType != types.OCIImageIndex {
		t.Fatalf("index.json should name one image index, got %+v", tm.Manifests)
	}
	if got := tm.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; got != testTag {
		t.Errorf("ref.name = %q, want %q", got, testTag)
	}
	idx, err := top.ImageIndex(tm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if got := im.Annotations["org.opencontainers.image.licenses"]; got != "Apache-2.0" {
		t.Errorf("index annotation org.opencontainers.image.licenses = %q, want Apache-2.0", got)
	}
	var platforms []string
	images := map[string]v1.Image{}
	for _, d := range im.Manifests {
		if d.Platform == nil {
			t.Fatalf("manifest %s has no platform", d.Digest)
		}
		platforms = append(platforms, d.Platform.String())
		if d.MediaType != types.OCIManifestSchema1 {
			t.Errorf("%s: media type %s", d.Platform, d.MediaType)
		}
		if images[d.Platform.Architecture], err = idx.Image(d.Digest); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(platforms)
	if want := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(platforms, want) {
		t.Fatalf("platforms %v, want %v", platforms, want)
	}

	for arch, img := range images {
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		c := cf.Config
		if cf.OS != "linux" || cf.Architecture != arch {
			t.Errorf("%s: config says %s/%s", arch, cf.OS, cf.Architecture)
		}
		if c.User != "65532:65532" {
			t.Errorf("%s: User %q, want non-root 65532:65532", arch, c.User)
		}
		if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/nodeid-init"}) || !slices.Equal(c.Cmd, []string{"--help"}) {
			t.Errorf("%s: Entrypoint %q Cmd %q", arch, c.Entrypoint, c.Cmd)
		}
		if c.WorkingDir != "/var/lib/nodeid" {
			t.Errorf("%s: WorkingDir %q", arch, c.WorkingDir)
		}
		for k, v := range map[string]string{
			"org.opencontainers.image.version":  testVersion,
			"org.opencontainers.image.revision": testRevision,
			"org.opencontainers.image.source":   "https://github.com/nodeid/nodeid",
			"org.opencontainers.image.licenses": "Apache-2.0",
		} {
			if c.Labels[k] != v {
				t.Errorf("%s: label %s = %q, want %q", arch, k, c.Labels[k], v)
			}
		}
		if !cf.Created.Time.Equal(time.Unix(testEpoch, 0)) {
			t.Errorf("%s: created %v, want SOURCE_DATE_EPOCH", arch, cf.Created)
		}
		m, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range m.Layers {
			if l.MediaType != types.OCILayer {
				t.Errorf("%s: layer media type %s", arch, l.MediaType)
			}
		}
	}

	// The filesystem of this machine's platform, run outside the image:
	// the binary is static.
	img := images[runtime.GOARCH]
	if img == nil {
		t.Skipf("no image for %s", runtime.GOARCH)
	}
	root := t.TempDir()
	hdrs := extract(t, img, root)
	for _, c := range []struct {
		name     string
		typ      byte
		mode     int64
		uid, gid int
	}{
		{"usr/local/bin/nodeid-init", tar.TypeReg, 0o755, 0, 0},
		{"etc/passwd", tar.TypeReg, 0o644, 0, 0},
		{"etc/group", tar.TypeReg, 0o644, 0, 0},
		{"var/lib/nodeid", tar.TypeDir, 0o755, 65532, 65532},
		{"home/nonroot", tar.TypeDir, 0o700, 65532, 65532},
		{"tmp", tar.TypeDir, 0o1777, 0, 0},
	} {
		h := hdrs[c.name]
		if h == nil {
			t.Errorf("no %s in the image", c.name)
			continue
		}
		if h.Typeflag != c.typ || h.Mode&0o7777 != c.mode || h.Uid != c.uid || h.Gid != c.gid {
			t.Errorf("%s: type %c mode %o uid %d gid %d, want %c %o %d %d", c.name, h.Typeflag, h.Mode, h.Uid, h.Gid, c.typ, c.mode, c.uid, c.gid)
		}
	}
	for n, h := range hdrs {
		if !h.ModTime.Equal(time.Unix(testEpoch, 0)) {
			t.Errorf("%s: mtime %v, want SOURCE_DATE_EPOCH", n, h.ModTime)
		}
	}
	passwd, _ := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if !strings.Contains(string(passwd), "\nnonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot 65532:\n%s", passwd)
	}
	group, _ := os.ReadFile(filepath.Join(root, "etc/group"))
	if !strings.Contains(string(group), "\nnonroot:x:65532:") {
		t.Errorf("/etc/group has no nonroot 65532:\n%s", group)
	}
	out, err := exec.Command(filepath.Join(root, "usr/local/bin/nodeid-init"), "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "nodeid-init "+testVersion+" ") {
		t.Errorf("extracted nodeid-init version: %v: %q, want the stamped %s", err, out, testVersion)
	}

	// As root: run it in the image's filesystem as the image's user, with no
	// host file; that user can write the lease directory and not /etc.
	if os.Getuid() != 0 {
		t.Log("not root: skipping the runs chrooted into the image's filesystem")
	} else {
		if err := os.Chmod(root, 0o755); err != nil {
			t.Fatal(err)
		}
		inImage := func(args ...string) (string, error) {
			cmd := exec.Command("/usr/local/bin/nodeid-init", args...)
			cmd.Dir = "/var/lib/nodeid"
			cmd.Env = []string{"NODEID_BUCKET=bucket", "NODEID_CLUSTER_SIZE=1", "NODEID_S3_PATH_STYLE=true",
				"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=x", "AWS_SECRET_ACCESS_KEY=y",
				"AWS_ENDPOINT_URL_S3=http://127.0.0.1:1", "NODEID_ACQUIRE_TIMEOUT=1s"}
			cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		if out, err := inImage("version"); err != nil || !strings.HasPrefix(out, "nodeid-init "+testVersion+" ") {
			t.Errorf("nodeid-init version in the image's filesystem: %v: %q", err, out)
		}
		// acquire checks its output files before it calls S3 (closed port here).
		out, _ := inImage("acquire", "--env-file", "/var/lib/nodeid/node.env", "--lease-file", "/var/lib/nodeid/lease.json")
		if !strings.Contains(out, "connection refused") {
			t.Errorf("acquire with its files in /var/lib/nodeid should get as far as S3: %q", out)
		}
		out, _ = inImage("acquire", "--env-file", "/etc/node.env")
		if !strings.Contains(out, "directory /etc is not writable") {
			t.Errorf("acquire with its env file in /etc should be refused: %q", out)
		}
	}

	// The tar: the layout plus a docker manifest.json naming each platform.
	names := tarNames(t, tarPath)
	for _, n := range []string{"oci-layout", "index.json", "manifest.json"} {
		if !slices.Contains(names, n) {
			t.Errorf("tar has no %s: %v", n, names)
		}
	}
	for arch, img := range images {
		tg, err := name.NewTag("nodeid-init:" + testTag + "-" + arch)
		if err != nil {
			t.Fatal(err)
		}
		ti, err := tarball.ImageFromPath(tarPath, &tg)
		if err != nil {
			t.Fatalf("docker-archive view of the tar, %s: %v", tg, err)
		}
		want, _ := img.ConfigName()
		if got, err := ti.ConfigName(); err != nil || got != want {
			t.Errorf("%s in the tar: config %v %v, want %v", tg, got, err, want)
		}
	}

	// What crane push dist/oci REF does: the whole index reaches a registry.
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	ref, err := name.ParseReference(strings.TrimPrefix(reg.URL, "http://") + "/nodeid-init:" + testTag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatalf("push: %v", err)
	}
	pushed, err := remote.Index(ref)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := digest(t, pushed), tm.Manifests[0].Digest; got != want {
		t.Errorf("pushed index %s, layout has %s", got, want)
	}

	// Same inputs, same bytes.
	dir := t.TempDir()
	if err := runTool(append(args, "-layout", filepath.Join(dir, "oci"), "-tar", filepath.Join(dir, "image.tar"))...); err != nil {
		t.Fatal(err)
	}
	if a, b := fileSum(t, tarPath), fileSum(t, filepath.Join(dir, "image.tar")); a != b {
		t.Errorf("two runs gave different tars: %x, %x", a, b)
	}
}

func digest(t *testing.T, idx v1.ImageIndex) v1.Hash {
	t.Helper()
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func extract(t *testing.T, img v1.Image, root string) map[string]*tar.Header {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	hdrs := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return hdrs
		}
		if err != nil {
			t.Fatal(err)
		}
		n := strings.TrimSuffix(h.Name, "/")
		hdrs[n] = h
		p := filepath.Join(root, n)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			var b bytes.Buffer
			// Extract lists the top layer first: parents may come later.
			if _, err = io.Copy(&b, tr); err == nil {
				err = os.MkdirAll(filepath.Dir(p), 0o755)
			}
			if err == nil {
				err = os.WriteFile(p, b.Bytes(), os.FileMode(h.Mode&0o777))
			}
		default:
			t.Errorf("%s: unexpected type %c", n, h.Typeflag)
		}
		if err == nil && os.Getuid() == 0 {
			// Owners and the sticky bit as in the image, for the chroot runs.
			mode := os.FileMode(h.Mode & 0o777)
			if h.Mode&0o1000 != 0 {
				mode |= os.ModeSticky
			}
			if err = os.Chmod(p, mode); err == nil {
				err = os.Lchown(p, h.Uid, h.Gid)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func tarNames(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}
