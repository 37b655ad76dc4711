package main_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// forBothServers runs f on gofakes3 and on VersityGW.
func forBothServers(t *testing.T, f func(t *testing.T, srv *s3test.Server)) {
	t.Run("gofakes3", func(t *testing.T) { f(t, s3test.NewFake(t)) })
	t.Run("versitygw", func(t *testing.T) { f(t, s3test.StartVersity(t)) })
}

// replaceObject writes key unconditionally, deleting it first (gofakes3
// keeps the metadata keys of the object a PUT replaces).
func replaceObject(t *testing.T, srv *s3test.Server, key string, body []byte, meta map[string]string) {
	t.Helper()
	if _, err := srv.Client(t).DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String(key)}); err != nil {
		t.Fatal(err)
	}
	putObject(t, srv, key, string(body), meta)
}

// Issue 23.6: the cluster marker records L = 20 s, the operator's command
// runs with 2 s, and the objects record no duration. Written 4 s ago, their
// holders may be alive: release --force refuses without --yes and scale
// says it would fence. On main both judged by 2 s: "expired".
func TestAdminGuardsAssumeTheClustersLeaseDuration(t *testing.T) {
	forBothServers(t, func(t *testing.T, srv *s3test.Server) {
		c := newCluster(t, srv, 2)
		ctx := context.Background()
		if err := nodeid.Initialize(ctx, c.repo(), 2, "boot", 20*time.Second); err != nil {
			t.Fatal(err)
		}
		for id := range 2 {
			l := nodeid.Lease{TaskID: "holder-" + string(rune('a'+id)), Instance: nodeid.NodeInstance{ID: id, Version: 1},
				Expires: time.Now().Add(time.Minute), Nonce: "n" + string(rune('a'+id)), Acquirable: true}
			body, meta := l.Encode()
			replaceObject(t, srv, nodeid.LeaseKey("e2e/", id), body, meta)
		}
		time.Sleep(4 * time.Second) // past 2 s + 1 s by S3's clock, well within 20 s

		rel := c.start("operator", nil, "release", "--node", "0", "--force")
		if code, out := rel.wait(t, 20*time.Second), rel.out.String(); code != 2 || !strings.Contains(out, "looks alive") {
			t.Errorf("release --force of a holder within the cluster's lease duration: exit %d, want 2 (looks alive):\n%s", code, out)
		}
		sc := c.start("operator-scale", nil, "scale", "--cluster-size", "1", "--dry-run")
		if code, out := sc.wait(t, 20*time.Second), sc.out.String(); code != 0 || !strings.Contains(out, "FENCES its live holder holder-b") {
			t.Errorf("scale --dry-run to 1 with node 1 within the cluster's lease duration: exit %d, want it to say it fences holder-b:\n%s", code, out)
		}
	})
}
