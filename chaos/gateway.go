package chaos

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nodeid/nodeid/internal/versitygw"
)

// Region of the throw-away gateways.
const gwRegion = versitygw.Region

// ErrNoVersity is returned by FindVersity when the binary is not installed.
var ErrNoVersity = versitygw.ErrNotInstalled

// FindVersity returns the path of the versitygw binary: $NODEID_VERSITYGW,
// else $PATH, else $(go env GOPATH)/bin.
func FindVersity() (string, error) { return versitygw.Find() }

// gateway is one VersityGW process (posix backend) on a loopback port, with
// one bucket. Each experiment gets its own, so no state leaks between them.
type gateway struct {
	*versitygw.Gateway
	Bucket string
}

// startGateway starts bin with its backend and log under dir and creates
// the experiment's bucket.
func startGateway(ctx context.Context, bin, dir string) (*gateway, error) {
	g, err := versitygw.Start(bin, dir)
	if err != nil {
		return nil, err
	}
	gw := &gateway{Gateway: g, Bucket: "chaos"}
	if err := g.CreateBucket(ctx, gw.Bucket); err != nil {
		g.Stop()
		return nil, err
	}
	return gw, nil
}

// client returns an S3 client talking to the gateway directly, bypassing
// every fault proxy: the operator's (or the saboteur's) view.
func (gw *gateway) client(ctx context.Context) (*s3.Client, error) { return gw.Client(ctx) }

func (gw *gateway) stop() { gw.Stop() }
