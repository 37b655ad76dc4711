package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nodeid/nodeid/internal/versitygw"
	"github.com/nodeid/nodeid/nodeid"
)

// Region of the loopback gateway; it exists only for this run.
const region = versitygw.Region

// gateway is a VersityGW process (posix backend) on a loopback port.
type gateway struct {
	*versitygw.Gateway
	client  *s3.Client // admin client: buckets and outside writes
	buckets atomic.Int64
}

// findVersity looks where `make versitygw` installs the gateway.
func findVersity() (string, error) { return versitygw.Find() }

// startGateway starts versitygw with its data under dir and waits until it
// is ready.
func startGateway(ctx context.Context, bin, dir string) (*gateway, error) {
	gw, err := versitygw.Start(bin, dir)
	if err != nil {
		return nil, err
	}
	g := &gateway{Gateway: gw}
	if g.client, err = g.newClient(ctx, g.URL); err != nil {
		gw.Stop()
		return nil, err
	}
	return g, nil
}

// newClient returns a lease client (the library's own settings) for the
// gateway or for a proxy in front of it.
func (g *gateway) newClient(ctx context.Context, endpoint string) (*s3.Client, error) {
	return nodeid.NewS3Client(ctx, nodeid.S3Config{Region: region, Endpoint: endpoint, PathStyle: true, AccessKey: g.AccessKey, SecretKey: g.SecretKey})
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

func (g *gateway) stop() { g.Stop() }

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
