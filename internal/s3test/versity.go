package s3test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// VersityEnv names the environment variable that points at a versitygw
// binary, overriding the search of $PATH and $(go env GOPATH)/bin.
const VersityEnv = "NODEID_VERSITYGW"

// VersityInstall is the command that installs the version of VersityGW the
// tests were written against.
const VersityInstall = "go install github.com/versity/versitygw/cmd/versitygw@v1.8.0"

// versityStartTimeout bounds how long the gateway may take to answer.
const versityStartTimeout = 20 * time.Second

// shared is the package-wide gateway started lazily by StartVersity when
// the test binary runs under VersityMain.
var shared struct {
	sync.Mutex
	enabled bool
	gw      *versityProc
	err     error // sticky start error, reported to every test
	skip    string
}

// VersityMain runs the tests of a package with one VersityGW process shared
// by all of them, started when the first test calls StartVersity and
// stopped after the last test, because starting it costs a noticeable
// fraction of a second. Each test still gets its own fresh bucket. Use it
// from TestMain:
//
//	func TestMain(m *testing.M) { s3test.VersityMain(m) }
//
// VersityMain does not return; it exits with the tests' status.
func VersityMain(m *testing.M) {
	shared.Lock()
	shared.enabled = true
	shared.Unlock()

	code := m.Run()

	shared.Lock()
	if shared.gw != nil {
		shared.gw.stop()
		os.RemoveAll(shared.gw.dir)
		shared.gw = nil
	}
	shared.Unlock()
	os.Exit(code)
}

// StartVersity returns a VersityGW (posix backend on a temporary directory)
// on a loopback port with a fresh bucket. Under VersityMain the gateway is
// shared by the package's tests; otherwise each call starts its own process,
// stopped when the test ends.
//
// If the binary cannot be found the test is skipped, unless the CI
// environment variable is set to a true value: integration tests must run
// under CI, so there it fails instead.
func StartVersity(t testing.TB) *Server {
	t.Helper()
	var gw *versityProc
	shared.Lock()
	enabled := shared.enabled
	if enabled {
		if shared.gw == nil && shared.err == nil && shared.skip == "" {
			bin, skip, err := findVersity()
			switch {
			case err != nil:
				shared.err = err
			case skip != "":
				shared.skip = skip
			default:
				dir, err := os.MkdirTemp("", "s3test-versitygw-")
				if err != nil {
					shared.err = err
					break
				}
				shared.gw, shared.err = startVersityProc(bin, dir)
				if shared.err != nil {
					os.RemoveAll(dir)
				}
			}
		}
		gw = shared.gw
		err, skip := shared.err, shared.skip
		shared.Unlock()
		if skip != "" {
			t.Skip(skip)
		}
		if err != nil {
			t.Fatalf("s3test: %v", err)
		}
	} else {
		shared.Unlock()
		bin, skip, err := findVersity()
		if err != nil {
			t.Fatalf("s3test: %v", err)
		}
		if skip != "" {
			t.Skip(skip)
		}
		gw, err = startVersityProc(bin, t.TempDir())
		if err != nil {
			t.Fatalf("s3test: %v", err)
		}
		t.Cleanup(gw.stop)
	}

	// Show what the gateway logged when a test fails: its errors are often
	// the only explanation of an unexpected answer.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("versitygw log (%s), last lines:\n%s", gw.logPath, tailFile(gw.logPath, 40))
		}
	})

	s := &Server{
		Kind:      KindVersity,
		URL:       gw.url,
		AccessKey: accessKey,
		SecretKey: secretKey,
		Region:    region,
	}
	s.Bucket = s.NewBucket(t)
	return s
}

// findVersity returns the path of the versitygw binary, or a reason to skip,
// or an error when the binary is required (CI) or explicitly configured but
// unusable.
func findVersity() (bin, skip string, err error) {
	if p := os.Getenv(VersityEnv); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			return "", "", fmt.Errorf("%s=%s is not an executable: %v", VersityEnv, p, err)
		}
		return p, "", nil
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, "", nil
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, dir := range filepath.SplitList(strings.TrimSpace(string(out))) {
			p := filepath.Join(dir, "bin", "versitygw")
			if _, err := exec.LookPath(p); err == nil {
				return p, "", nil
			}
		}
	}
	msg := fmt.Sprintf("versitygw not found in $PATH, $(go env GOPATH)/bin or $%s; install it with: %s", VersityEnv, VersityInstall)
	if inCI() {
		return "", "", errors.New(msg + " (CI is set, so integration tests may not be skipped)")
	}
	return "", msg, nil
}

// inCI reports whether the CI environment variable asks for mandatory
// integration tests. CI systems set CI=true; any value other than empty,
// "0" or "false" counts.
func inCI() bool {
	switch strings.ToLower(os.Getenv("CI")) {
	case "", "0", "false":
		return false
	}
	return true
}

// versityProc is a running versitygw process.
type versityProc struct {
	cmd     *exec.Cmd
	url     string
	dir     string
	logPath string
	exited  chan struct{} // closed when the process has exited
	logFile *os.File
}

// startVersityProc starts bin with a posix backend under dir/root and waits
// until it answers HTTP. The port is chosen by binding port 0 and releasing
// it, which can race with other processes, so a start whose process exits
// early is retried on another port.
func startVersityProc(bin, dir string) (*versityProc, error) {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var p *versityProc
		p, err = startVersityOnce(bin, dir, attempt)
		if err == nil {
			return p, nil
		}
	}
	return nil, err
}

func startVersityOnce(bin, dir string, attempt int) (*versityProc, error) {
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	addr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, fmt.Sprintf("versitygw-%d.log", attempt))
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--port", addr, "posix", root)
	// Credentials go through the environment rather than flags so they do
	// not show up in process listings. VGW_* variables from the caller's
	// environment could change the gateway's behaviour; drop them.
	env := []string{"ROOT_ACCESS_KEY=" + accessKey, "ROOT_SECRET_KEY=" + secretKey}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VGW_") && !strings.HasPrefix(kv, "ROOT_") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %v", bin, err)
	}
	p := &versityProc{
		cmd:     cmd,
		url:     "http://" + addr,
		dir:     dir,
		logPath: logPath,
		exited:  make(chan struct{}),
		logFile: logFile,
	}
	go func() {
		cmd.Wait()
		close(p.exited)
	}()
	if err := p.waitReady(); err != nil {
		p.stop()
		return nil, fmt.Errorf("versitygw on %s: %v; log %s, last lines:\n%s", addr, err, logPath, tailFile(logPath, 40))
	}
	return p, nil
}

// waitReady polls until the gateway answers any HTTP response: an
// unauthenticated request gets 403, which proves the S3 front end is up.
func (p *versityProc) waitReady() error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(versityStartTimeout)
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 200*time.Millisecond) {
		resp, err := client.Get(p.url + "/")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("exited early: %v", p.cmd.ProcessState)
		case <-time.After(delay):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not answering after %v: %v", versityStartTimeout, err)
		}
	}
}

// stop terminates the gateway, first politely so it can finish writes.
func (p *versityProc) stop() {
	select {
	case <-p.exited:
	default:
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(5 * time.Second):
			p.cmd.Process.Kill()
			<-p.exited
		}
	}
	p.logFile.Close()
}

func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// tailFile returns the last n lines of the file at path.
func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	data = bytes.TrimRight(data, "\n")
	if len(data) == 0 {
		return "(empty)"
	}
	lines := bytes.Split(data, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
