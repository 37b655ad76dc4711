package nodeid_test

import (
	"context"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
)

// A waiting task with a SpareListInterval reads only the release hint at
// each poll and lists every SpareListInterval; a graceful release is still
// taken at the next poll (long before the next listing), and a crashed
// holder's lease once it has expired.
func TestWaitingTaskPollsTheReleaseHintAndListsSeldom(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		ctx := context.Background()
		holder := newProvider(t, newRepo(t, srv, ""), fastConfig(t, "holder", 1, nil))
		acquire(t, holder, 20*time.Second)

		ops := &opCounts{}
		cfg := fastConfig(t, "spare", 1, nil)
		cfg.SpareListInterval = 3 * time.Second
		spare := newProvider(t, newS3Repo(t, srv, "", testPrefix, 2*time.Second, countingOps(ops)), cfg)
		res := acquireAsync(spare)
		time.Sleep(2500 * time.Millisecond)
		if lists, heads := ops.get("list"), ops.get("head"); lists != 1 || heads < 10 {
			t.Fatalf("waiting 2.5 s with polls every 50-100 ms and listings every 3 s: %d LISTs, %d HEADs; want 1 and at least 10", lists, heads)
		}
		released := time.Now()
		if err := holder.Close(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-res:
			if r.err != nil || r.inst.Version != 2 {
				t.Fatalf("spare: %v, %v; want node 0 v2", r.inst, r.err)
			}
			if took := time.Since(released); took >= cfg.SpareListInterval {
				t.Errorf("the release was taken %v after it: by a listing, not by the hint", took)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("spare did not take the released ID")
		}

		// Crash: the spare's successor sees the expiry at a listing.
		ops2 := &opCounts{}
		cfg2 := fastConfig(t, "spare-2", 1, nil)
		cfg2.SpareListInterval = time.Second
		spare2 := newProvider(t, newS3Repo(t, srv, "", testPrefix, 2*time.Second, countingOps(ops2)), cfg2)
		res2 := acquireAsync(spare2)
		time.Sleep(300 * time.Millisecond)
		if _, err := spare.HandOff(ctx); err != nil { // stops renewing, writes nothing
			t.Fatal(err)
		}
		select {
		case r := <-res2:
			if r.err != nil || r.inst.Version != 3 {
				t.Fatalf("spare-2: %v, %v; want node 0 v3", r.inst, r.err)
			}
		case <-time.After(2*time.Second + time.Second + cfg2.SpareListInterval + 3*time.Second):
			t.Fatal("spare-2 did not take the expired lease")
		}
	})
}
