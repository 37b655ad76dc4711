package nodeid_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// pagedRepo is a repository whose listings ask for maxKeys keys per page,
// as S3 answers a bucket with more than 1,000 keys; pages counts the
// ListObjectsV2 requests.
func pagedRepo(t *testing.T, srv *s3test.Server, maxKeys int32, pages *atomic.Int64) *nodeid.S3Repository {
	t.Helper()
	return newS3Repo(t, srv, "", testPrefix, 5*time.Second, beforeEveryRequest("smallPages", func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
		if l, ok := in.Parameters.(*s3.ListObjectsV2Input); ok {
			l.MaxKeys = aws.Int32(maxKeys)
			pages.Add(1)
		}
		return next.HandleInitialize(ctx, in)
	}))
}

// A listing that takes many pages is whole: every lease object with the
// ETag a GET gives, the marker wherever its page falls, nothing of other
// prefixes or of other keys under ours; and the protocol works on it
// (bootstrap, and acquisition up to the ID only the last pages show).
func TestListingAcrossManyPages(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		ctx := context.Background()
		var pages atomic.Int64
		repo := pagedRepo(t, srv, 2, &pages)
		const size = 12
		if err := nodeid.Initialize(ctx, repo, size, "boot", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		// Keys that are not leases, under our prefix and beside it, sort
		// between the lease keys and after the marker, so the marker is on
		// neither the first nor the last page.
		for _, k := range []string{testPrefix + "0.json.bak", testPrefix + "5x.json", testPrefix + "zz1", testPrefix + "zz2", testPrefix + "zz3", "cluster-b/3.json", "cluster-a.json"} {
			putRaw(t, srv, k, "{}", nil)
		}

		pages.Store(0)
		l, err := repo.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// 12 leases, the marker and 5 other keys under the prefix: 18 keys,
		// 9 pages of 2.
		if n := pages.Load(); n < 9 {
			t.Fatalf("the listing took %d pages; max-keys was not applied, the test proves nothing", n)
		}
		if !l.MarkerSeen {
			t.Error("the marker was not seen across the pages")
		}
		if l.ServerDate.IsZero() {
			t.Error("no server date")
		}
		if len(l.Slots) != size {
			t.Fatalf("%d slots, want %d: %+v", len(l.Slots), size, l.Slots)
		}
		for i, s := range l.Slots {
			if s.ID != i {
				t.Fatalf("slot %d is node %d: not ascending by ID, or one missing: %+v", i, s.ID, l.Slots)
			}
			rec, err := repo.Get(ctx, s.ID)
			if err != nil || rec.ETag != s.ETag || rec.Size != s.Size {
				t.Fatalf("node %d: listed %s/%d, read %s/%d (%v)", s.ID, s.ETag, s.Size, rec.ETag, rec.Size, err)
			}
		}

		// Eleven tasks hold 0..10; the twelfth must find node 11, which
		// only the last pages show.
		for i := 0; i < size-1; i++ {
			acquire(t, newProvider(t, repo, fastConfig(t, fmt.Sprintf("t%d", i), size, nil)), 10*time.Second)
		}
		last := acquire(t, newProvider(t, repo, fastConfig(t, "last", size, nil)), 10*time.Second)
		got := map[int]bool{}
		l, err = repo.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range l.Slots {
			rec, err := repo.Get(ctx, s.ID)
			if err != nil || !rec.Lease.Held() {
				t.Fatalf("node %d not held after %d acquisitions: %+v %v", s.ID, size, rec.Lease, err)
			}
			got[s.ID] = true
		}
		if len(got) != size {
			t.Fatalf("held %v, last got %v", got, last)
		}
	})
}
