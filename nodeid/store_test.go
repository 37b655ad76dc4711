package nodeid_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// Is If-Match a compare-and-swap on the stores the tests trust? Several
// candidates PUT with If-Match on the same ETag at once; at most one may win.
func TestConcurrentIfMatchHasOneWinner(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		repo := newRepo(t, srv, "")
		if err := nodeid.Initialize(context.Background(), repo, 1, "boot", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		for round := 0; round < 40; round++ {
			rec, err := repo.Get(context.Background(), 0)
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			wins := 0
			var wg sync.WaitGroup
			for i := 0; i < 6; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					l := nodeid.Lease{TaskID: fmt.Sprintf("c%d", i), Instance: nodeid.NodeInstance{ID: 0, Version: nodeid.Version(round + 1)},
						Expires: time.Now(), Duration: 2 * time.Second, Nonce: fmt.Sprintf("%d-%d", round, i), Acquirable: true}
					_, err := repo.Write(context.Background(), l, rec.ETag)
					if err == nil {
						mu.Lock()
						wins++
						mu.Unlock()
					} else if !errors.Is(err, nodeid.ErrPreconditionFailed) && !errors.Is(err, nodeid.ErrConflict) {
						t.Logf("round %d: %v", round, err)
					}
				}()
			}
			wg.Wait()
			if wins > 1 {
				t.Fatalf("round %d: %d conditional writes on one ETag all succeeded", round, wins)
			}
		}
	})
}
