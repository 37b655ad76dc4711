package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
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

// Credentials of the throw-away gateways; they never leave loopback.
const (
	gwAccessKey = "chaos-access"
	gwSecretKey = "chaos-secret-key"
	gwRegion    = "us-east-1"
)

// ErrNoVersity is returned by FindVersity when the binary is not installed.
var ErrNoVersity = errors.New("versitygw not found in $NODEID_VERSITYGW, $PATH or $(go env GOPATH)/bin; install it with: make versitygw")

// FindVersity returns the path of the versitygw binary: $NODEID_VERSITYGW,
// else $PATH, else $(go env GOPATH)/bin.
func FindVersity() (string, error) {
	if p := os.Getenv("NODEID_VERSITYGW"); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			return "", fmt.Errorf("NODEID_VERSITYGW=%s: %w", p, err)
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
	return "", ErrNoVersity
}

// gateway is one VersityGW process (posix backend) on a loopback port, with
// one bucket. Each experiment gets its own, so no state leaks between them.
type gateway struct {
	URL    string
	Bucket string
	cmd    *exec.Cmd
	exited chan struct{}
	log    *os.File
}

// startGateway starts bin with its backend and log under dir and creates a
// bucket. The port is found by binding port 0 and releasing it, which can
// race with another process, so a gateway that exits at once is retried.
func startGateway(ctx context.Context, bin, dir string) (*gateway, error) {
	var err error
	for attempt := range 3 {
		var gw *gateway
		if gw, err = startGatewayOnce(bin, dir, attempt); err == nil {
			if err = gw.createBucket(ctx, "chaos"); err == nil {
				return gw, nil
			}
			gw.stop()
		}
	}
	return nil, err
}

func startGatewayOnce(bin, dir string, attempt int) (*gateway, error) {
	root := filepath.Join(dir, "s3")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	addr := l.Addr().String()
	l.Close()
	logFile, err := os.Create(filepath.Join(dir, fmt.Sprintf("versitygw-%d.log", attempt)))
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	cmd := exec.Command(bin, "--port", addr, "posix", root)
	env := []string{"ROOT_ACCESS_KEY=" + gwAccessKey, "ROOT_SECRET_KEY=" + gwSecretKey}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VGW_") && !strings.HasPrefix(kv, "ROOT_") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Die with us (best effort: tied to the forking thread).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	gw := &gateway{URL: "http://" + addr, cmd: cmd, exited: make(chan struct{}), log: logFile}
	go func() {
		cmd.Wait()
		close(gw.exited)
	}()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := client.Get(gw.URL + "/")
		if err == nil {
			resp.Body.Close()
			return gw, nil // any answer, even 403, means the front end is up
		}
		if time.Now().After(deadline) {
			gw.stop()
			return nil, fmt.Errorf("versitygw on %s not answering: %w", addr, err)
		}
		select {
		case <-gw.exited:
			logFile.Close()
			return nil, fmt.Errorf("versitygw on %s exited at start: %v", addr, cmd.ProcessState)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// client returns an S3 client talking to the gateway directly, bypassing
// every fault proxy: the operator's (or the saboteur's) view.
func (gw *gateway) client(ctx context.Context) (*s3.Client, error) {
	return nodeid.NewS3Client(ctx, nodeid.S3Config{Endpoint: gw.URL, Region: gwRegion, PathStyle: true,
		AccessKey: gwAccessKey, SecretKey: gwSecretKey})
}

func (gw *gateway) createBucket(ctx context.Context, name string) error {
	c, err := gw.client(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		return fmt.Errorf("create bucket: %w", err)
	}
	gw.Bucket = name
	return nil
}

// stop terminates the gateway, politely first.
func (gw *gateway) stop() {
	select {
	case <-gw.exited:
	default:
		gw.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-gw.exited:
		case <-time.After(5 * time.Second):
			gw.cmd.Process.Kill()
			<-gw.exited
		}
	}
	gw.log.Close()
}
