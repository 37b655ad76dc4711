package datadir

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/efsfs"
	"github.com/nodeid/nodeid/nodeid"
)

// Regression (review): a flush that timed out in Prepare's garbage
// collection (after the marker) was only logged, and Prepare succeeded:
// a hung file system went unreported to nodeid-init, whose hang handling
// (exit 7, the lease not given back) keys on ErrSyncTimeout.
func TestSyncTimeoutInPreparesGCIsReturned(t *testing.T) {
	efs := efsfs.MountT(t, efsfs.Profile{})
	root := efs.Dir
	claimRoot(t, root, clusterA)
	for _, v := range []nodeid.Version{1, 2, 3} {
		makeVersion(t, root, 0, v, map[string]string{"a/f": "data"}, v)
	}
	old := SyncTimeout
	SyncTimeout = time.Second
	t.Cleanup(func() { SyncTimeout = old })
	marked, hung := false, false
	setHook(t, &testHookAfterMarker, func(string) { marked = true })
	setHook(t, &testHookGarbageListed, func(string) {
		if marked && !hung {
			hung = true
			efs.HangFsync()
		}
	})
	_, _, err := Prepare(context.Background(), root, inst(0, 4), Options{Cluster: clusterA, Tenure: "task-a", Keep: 1, Logger: quiet})
	efs.Release()
	testHookAfterMarker, testHookGarbageListed = nil, nil
	if !hung {
		t.Fatal("Prepare's garbage collection listed no garbage after the marker")
	}
	if !errors.Is(err, ErrSyncTimeout) {
		t.Fatalf("Prepare with every fsync hanging during its GC: %v, want ErrSyncTimeout", err)
	}
}
