package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nodeid/nodeid/nodeid"
)

// Credentials of the loopback gateway; it exists only for this run.
const (
	accessKey = "k"
	secretKey = "s"
	region    = "us-east-1"
)

// gateway is a VersityGW process (posix backend) on a loopback port.
type gateway struct {
	URL     string
	cmd     *exec.Cmd
	exited  chan struct{}
	logPath string
	client  *s3.Client // admin client: buckets and outside writes
	buckets atomic.Int64
}

// findVersity looks where `make versitygw` installs the gateway.
func findVersity() (string, error) {
	if p := os.Getenv("NODEID_VERSITYGW"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, dir := range filepath.SplitList(strings.TrimSpace(string(out))) {
			p := filepath.Join(dir, "bin", "versitygw")
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("versitygw not found in $PATH or $(go env GOPATH)/bin; run make versitygw")
}

// startGateway starts versitygw with its data under dir and waits until it
// answers HTTP.
func startGateway(ctx context.Context, bin, dir string) (*gateway, error) {
	root := filepath.Join(dir, "gw-root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	g := &gateway{URL: "http://" + addr, exited: make(chan struct{}), logPath: filepath.Join(dir, "versitygw.log")}
	logf, err := os.Create(g.logPath)
	if err != nil {
		return nil, err
	}
	g.cmd = exec.Command(bin, "--port", addr, "posix", root)
	g.cmd.Env = append(cleanEnv(), "ROOT_ACCESS_KEY="+accessKey, "ROOT_SECRET_KEY="+secretKey)
	g.cmd.Stdout, g.cmd.Stderr = logf, logf
	// The gateway must not outlive the benchmark on a shared machine.
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := g.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start versitygw: %w", err)
	}
	go func() { g.cmd.Wait(); logf.Close(); close(g.exited) }()

	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := hc.Get(g.URL + "/")
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case <-g.exited:
			return nil, fmt.Errorf("versitygw exited early; see %s", g.logPath)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			g.stop()
			return nil, fmt.Errorf("versitygw not answering on %s: %v", addr, err)
		}
	}
	g.client, err = g.newClient(ctx, g.URL)
	if err != nil {
		g.stop()
		return nil, err
	}
	return g, nil
}

// newClient returns a lease client (the library's own settings) for the
// gateway or for a proxy in front of it.
func (g *gateway) newClient(ctx context.Context, endpoint string) (*s3.Client, error) {
	return nodeid.NewS3Client(ctx, nodeid.S3Config{Region: region, Endpoint: endpoint, PathStyle: true, AccessKey: accessKey, SecretKey: secretKey})
}

// newBucket creates a fresh bucket, so every repetition starts from a known
// state and no scenario sees another's leases.
func (g *gateway) newBucket(ctx context.Context, what string) (string, error) {
	name := fmt.Sprintf("b%d-%s", g.buckets.Add(1), what)
	name = strings.Trim(name[:min(len(name), 63)], "-")
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := g.client.CreateBucket(cctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		return "", fmt.Errorf("create bucket %s: %w", name, err)
	}
	return name, nil
}

func (g *gateway) stop() {
	select {
	case <-g.exited:
		return
	default:
	}
	g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.exited:
	case <-time.After(5 * time.Second):
		g.cmd.Process.Kill()
		<-g.exited
	}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// cleanEnv is the caller's environment without anything that would point
// the gateway or nodeid-init elsewhere (AWS profiles, endpoints, VGW_*,
// NODEID_*): the benchmark must run on loopback only.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "AWS_") || strings.HasPrefix(k, "VGW_") || strings.HasPrefix(k, "ROOT_") || strings.HasPrefix(k, "NODEID_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "AWS_CONFIG_FILE=/nonexistent", "AWS_SHARED_CREDENTIALS_FILE=/nonexistent", "AWS_EC2_METADATA_DISABLED=true")
}
