// Package versitygw finds and runs VersityGW, the S3-compatible server that
// the integration tests, the chaos experiments and the benchmarks run
// against on loopback. One place knows how to start it, wait for it and
// stop it.
package versitygw

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nodeid/nodeid/nodeid"
)

// Version is the release the project is tested against; the Makefile reads
// it from this line (make versitygw), so it is written nowhere else.
const Version = "v1.8.0"

// Install is the command that installs it (`make versitygw` runs it).
const Install = "go install github.com/versity/versitygw/cmd/versitygw@" + Version

// EnvBinary names the variable that points at a versitygw binary, overriding
// the search of $PATH and $(go env GOPATH)/bin.
const EnvBinary = "NODEID_VERSITYGW"

// Region of every gateway started here.
const Region = "us-east-1"

// startTimeout bounds how long a gateway may take to answer.
const startTimeout = 20 * time.Second

// ErrNotInstalled is returned by Find when no binary is found.
var ErrNotInstalled = errors.New("versitygw not found in $" + EnvBinary + ", $PATH or $(go env GOPATH)/bin; install it with: " + Install)

// Find returns the path of the versitygw binary: $NODEID_VERSITYGW, else
// $PATH, else $(go env GOPATH)/bin.
func Find() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			return "", fmt.Errorf("%s=%s is not an executable: %w", EnvBinary, p, err)
		}
		return p, nil
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, dir := range filepath.SplitList(strings.TrimSpace(string(out))) {
			p := filepath.Join(dir, "bin", "versitygw")
			if _, err := exec.LookPath(p); err == nil {
				return p, nil
			}
		}
	}
	return "", ErrNotInstalled
}

// Gateway is a running versitygw process with a posix backend.
type Gateway struct {
	URL     string // http://127.0.0.1:PORT, path-style
	Dir     string // backend root and logs
	LogPath string

	// Root credentials, random per gateway: a client that reaches another
	// gateway (its port reused after this one died) is refused instead of
	// working on someone else's data.
	AccessKey, SecretKey string

	cmd     *exec.Cmd
	exited  chan struct{}
	logFile *os.File
}

// errExited marks a start attempt whose process died before it was ready,
// typically because another listener took the port first.
var errExited = errors.New("exited before it was ready")

// Start runs bin with its backend under dir and waits until it is ready. The
// port is found by binding port 0 and releasing it (versitygw cannot report
// a port it chose itself), which can race with another process, so a
// gateway that exits before it is ready is retried elsewhere.
func Start(bin, dir string) (*Gateway, error) {
	const attempts = 4
	var err error
	for attempt := 0; attempt < attempts; attempt++ {
		var g *Gateway
		if g, err = startOnce(bin, dir, attempt); !errors.Is(err, errExited) {
			return g, err
		}
	}
	return nil, fmt.Errorf("%d attempts: %w", attempts, err)
}

func startOnce(bin, dir string, attempt int) (*Gateway, error) {
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	// A bucket only our root has: an answer that lists it comes from our
	// gateway, not from whatever else may have taken the port.
	var b [8 + 8 + 16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	sentinel := fmt.Sprintf("ready-%x", b[:8])
	accessKey, secretKey := fmt.Sprintf("nodeid%x", b[8:16]), fmt.Sprintf("%x", b[16:])
	if err := os.Mkdir(filepath.Join(root, sentinel), 0o755); err != nil {
		return nil, err
	}
	defer os.Remove(filepath.Join(root, sentinel))
	addr, err := pickAddr()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, fmt.Sprintf("versitygw-%d.log", attempt))
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--port", addr, "posix", root)
	// Credentials go through the environment, not flags, so they do not
	// show in process listings; the caller's VGW_* variables could change
	// the gateway's behaviour, so they are dropped.
	env := []string{"ROOT_ACCESS_KEY=" + accessKey, "ROOT_SECRET_KEY=" + secretKey}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VGW_") && !strings.HasPrefix(kv, "ROOT_") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The gateway must not outlive its parent on a shared machine (best
	// effort: the signal is tied to the thread that forked).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	g := &Gateway{URL: "http://" + addr, Dir: dir, LogPath: logPath, AccessKey: accessKey, SecretKey: secretKey,
		cmd: cmd, exited: make(chan struct{}), logFile: logFile}
	go func() {
		_ = cmd.Wait()
		close(g.exited)
	}()
	if err := g.waitReady(sentinel); err != nil {
		g.Stop()
		return nil, fmt.Errorf("versitygw on %s: %w; log %s, last lines:\n%s", addr, err, logPath, g.Tail(40))
	}
	return g, nil
}

// waitReady polls until a signed ListBuckets lists sentinel while our
// process is alive. Any answer is not enough: another server may hold the
// port, and our gateway then dies with "address already in use", or binds
// later and misses the first requests.
func (g *Gateway) waitReady(sentinel string) error {
	// A request to a foreign server that holds the port but does not answer
	// must not delay noticing that our process has exited.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-g.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	c, err := g.Client(ctx)
	if err != nil {
		return err
	}
	noRetry := func(o *s3.Options) { o.RetryMaxAttempts = 1 }
	deadline := time.Now().Add(startTimeout)
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 200*time.Millisecond) {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		out, err := c.ListBuckets(rctx, &s3.ListBucketsInput{}, noRetry)
		rcancel()
		if err == nil {
			err = fmt.Errorf("%s answers without bucket %s: another server has the port", g.URL, sentinel)
			for _, b := range out.Buckets {
				if aws.ToString(b.Name) == sentinel {
					err = nil
				}
			}
		}
		select {
		case <-g.exited:
			return fmt.Errorf("%w (%v)", errExited, g.cmd.ProcessState)
		default:
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %v", startTimeout, err)
		}
		select {
		case <-g.exited:
			return fmt.Errorf("%w (%v)", errExited, g.cmd.ProcessState)
		case <-time.After(delay):
		}
	}
}

// PID is the gateway's process ID, e.g. to read its CPU time.
func (g *Gateway) PID() int { return g.cmd.Process.Pid }

// Exited is closed when the process has exited.
func (g *Gateway) Exited() <-chan struct{} { return g.exited }

// Stop terminates the gateway, first politely so it can finish writes.
func (g *Gateway) Stop() {
	select {
	case <-g.exited:
	default:
		_ = g.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-g.exited:
		case <-time.After(5 * time.Second):
			_ = g.cmd.Process.Kill()
			<-g.exited
		}
	}
	g.logFile.Close()
}

// Client returns an S3 client for the gateway, built as production builds
// one (nodeid.NewS3Client).
func (g *Gateway) Client(ctx context.Context) (*s3.Client, error) {
	return nodeid.NewS3Client(ctx, nodeid.S3Config{Endpoint: g.URL, Region: Region, PathStyle: true, AccessKey: g.AccessKey, SecretKey: g.SecretKey})
}

// CreateBucket creates a bucket.
func (g *Gateway) CreateBucket(ctx context.Context, name string) error {
	c, err := g.Client(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		return fmt.Errorf("create bucket %s: %w", name, err)
	}
	return nil
}

// Tail returns the last n lines of the gateway's log.
func (g *Gateway) Tail(n int) string {
	data, err := os.ReadFile(g.LogPath)
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

// pickAddr chooses the gateway's address; a test replaces it to lose the
// port race on purpose.
var pickAddr = freeLoopbackAddr

func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
