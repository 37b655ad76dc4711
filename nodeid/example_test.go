package nodeid_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/nodeid/nodeid/datadir"
	"github.com/nodeid/nodeid/nodeid"
)

// The examples run against an in-memory S3 server (gofakes3, as
// internal/s3test starts for the tests), so they need no AWS account. In
// production, NewS3Client reads the region and credentials from the
// standard AWS chain (the ECS task role).
const (
	exampleBucket = "leases"
	examplePrefix = "cluster-a/"
)

// startExampleS3 starts the in-memory S3 server with an empty bucket and
// returns a repository on it.
func startExampleS3(ctx context.Context) (repo *nodeid.S3Repository, stop func()) {
	backend := s3mem.New()
	if err := backend.CreateBucket(exampleBucket); err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(backend, gofakes3.WithoutVersioning()).Server())
	client, err := nodeid.NewS3Client(ctx, nodeid.S3Config{
		Endpoint:  srv.URL,
		PathStyle: true,
		Region:    "us-east-1",
		AccessKey: "example",
		SecretKey: "example",
	})
	if err != nil {
		log.Fatal(err)
	}
	repo, err = nodeid.NewS3Repository(client, exampleBucket, examplePrefix, 0)
	if err != nil {
		log.Fatal(err)
	}
	return repo, srv.Close
}

// acquireExample acquires a node ID for cfg, quietly and without the
// default OnLost (which exits the process).
func acquireExample(ctx context.Context, repo nodeid.Repository, cfg nodeid.Config) (*nodeid.Provider, nodeid.NodeInstance) {
	cfg.Logger, cfg.OnLost = quiet, func(error) {}
	p, err := nodeid.NewProvider(repo, cfg)
	if err != nil {
		log.Fatal(err)
	}
	inst, err := p.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	return p, inst
}

// quiet keeps the provider's and datadir's log lines out of the examples'
// output; a broker passes its own logger.
var quiet = slog.New(slog.DiscardHandler)

// fencedLog stands for any side effect of the broker: every write carries
// the fencing token, and the sink refuses a token older than one it has
// seen, so a stale holder's late write cannot land after its successor's.
type fencedLog struct{ highest nodeid.Version }

func (l *fencedLog) write(token nodeid.Version, entry string) error {
	if token < l.highest {
		return fmt.Errorf("refused %q: token %d is older than %d", entry, token, l.highest)
	}
	l.highest = token
	fmt.Printf("wrote %q with token %d\n", entry, token)
	return nil
}

// A broker embeds the provider: acquire a node ID, prepare the data
// directory of that tenure, stamp every write with the fencing token, stop
// when the tenure ends, and release the ID on a clean shutdown.
func ExampleProvider() {
	ctx := context.Background()
	repo, stop := startExampleS3(ctx)
	defer stop()

	// Refuse an endpoint that ignores conditional writes: leases on it
	// could have two holders.
	if err := repo.Probe(ctx); err != nil {
		log.Fatal(err)
	}

	p, err := nodeid.NewProvider(repo, nodeid.Config{
		TaskID:      "broker-a",
		ClusterSize: 3,
		Logger:      quiet,
		// The default exits the process at once (ExitCodeLeaseLost);
		// this broker stops itself on Done instead.
		OnLost: func(error) {},
	})
	if err != nil {
		log.Fatal(err)
	}
	inst, err := p.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("acquired", inst)

	// The data directory is per version (node-N/vK): a stale holder can
	// never write into its successor's directory.
	root, err := os.MkdirTemp("", "nodeid-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(root)
	dir, _, err := datadir.Prepare(ctx, root, inst, datadir.Options{
		PreviousGraceful: p.PreviousGracefullyShutdown(),
		Cluster:          datadir.Cluster{Bucket: exampleBucket, Prefix: examplePrefix},
		Tenure:           "broker-a",
		Logger:           quiet,
	})
	if err != nil {
		log.Fatal(err)
	}
	rel, _ := filepath.Rel(root, dir)
	fmt.Println("data directory", filepath.ToSlash(rel))

	// The broker stops the moment the tenure ends (lost or closed).
	stopped := make(chan struct{})
	go func() {
		<-p.Done()
		fmt.Println("broker stopped:", p.Err())
		close(stopped)
	}()

	// Every write: only while the lease is valid, stamped with its token.
	sink := &fencedLog{}
	if p.Valid() {
		if err := sink.write(p.Token(), "first record"); err != nil {
			log.Fatal(err)
		}
	}

	// A clean shutdown releases the ID: a waiting task takes it at once.
	if err := p.Close(ctx); err != nil {
		log.Fatal(err)
	}
	<-stopped
	// Output:
	// acquired node 2 v1
	// data directory node-2/v1
	// wrote "first record" with token 1
	// broker stopped: provider closed
}

// After a release the next holder takes the ID at once with the next
// version, and knows that its predecessor stopped cleanly: its data
// directory may be hard-linked instead of copied.
func ExampleProvider_Close() {
	ctx := context.Background()
	repo, stop := startExampleS3(ctx)
	defer stop()

	acquire := func(task string) *nodeid.Provider {
		p, inst := acquireExample(ctx, repo, nodeid.Config{TaskID: task, ClusterSize: 1})
		fmt.Printf("%s acquired %s, predecessor released it: %v\n", task, inst, p.PreviousGracefullyShutdown())
		return p
	}
	a := acquire("broker-a")
	if err := a.Close(ctx); err != nil {
		log.Fatal(err)
	}
	b := acquire("broker-b")
	defer b.Close(ctx)
	// Output:
	// broker-a acquired node 0 v1, predecessor released it: true
	// broker-b acquired node 0 v2, predecessor released it: true
}

// A holder whose lease is written over (here by an operator's forced
// release) learns it at its next renewal: Done is closed and Err says why.
// The broker must stop writing at once.
func ExampleProvider_Done() {
	ctx := context.Background()
	repo, stop := startExampleS3(ctx)
	defer stop()

	p, inst := acquireExample(ctx, repo, nodeid.Config{
		TaskID:        "broker-a",
		ClusterSize:   1,
		LeaseDuration: 2 * time.Second, // renewals every 2s/3, so the example is quick
	})
	if _, err := nodeid.ForceRelease(ctx, repo, inst.ID, 0, "operator"); err != nil {
		log.Fatal(err)
	}
	<-p.Done()
	fmt.Println("lease lost:", errors.Is(p.Err(), nodeid.ErrLeaseLost), "valid:", p.Valid())
	// Output:
	// lease lost: true valid: false
}
