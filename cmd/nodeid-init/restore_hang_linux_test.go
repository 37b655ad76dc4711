package main_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/efsfs"
	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// Review of 84b7b54: the exit on a hung file system (abandonOnHang) did not
// wait for the provider's restore of a deleted object's version; the next
// holder then started below it (invariant 2).
//
// Schedule (L = 8 s, R = 2 s, --fs-timeout 3 s):
//   - a dead holder left v1 with 400 files on a FUSE data root (10 ms per
//     metadata operation): `acquire` takes v2 and starts copying;
//   - right after the take the file system stops answering and someone
//     deletes e2e/0.json;
//   - at s + R the renewal finds it gone: the restore's creates meet 503
//     SlowDown for 3.5 s, inside the deadline;
//   - the probe times out at about s + 3 s: acquire must still exit only
//     once 0.json is back at v2.
func TestHungFileSystemExitWaitsForTheRestoreOfADeletedObject(t *testing.T) {
	f := efsfs.MountT(t, efsfs.Profile{Meta: 10 * time.Millisecond})
	srv := s3test.StartVersity(t)
	c := newCluster(t, srv, 1)
	c.env = append(c.env, "NODEID_LEASE_DURATION=8s", "NODEID_RENEW_INTERVAL=2s", "NODEID_FS_TIMEOUT=3s")
	v1 := c.deadHolderOfV1Leasing(t, f.Backing, 8*time.Second)
	for i := range 400 {
		if err := os.WriteFile(filepath.Join(v1, fmt.Sprintf("f%03d", i)), []byte("data"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	px := newRestoreProxy(t, srv.URL, "e2e/0.json", 0, 3500*time.Millisecond)
	envFile := filepath.Join(t.TempDir(), "node.env")
	holder := c.start("holder", []string{"AWS_ENDPOINT_URL_S3=" + px.URL, "NODEID_ENV_FILE=" + envFile, "NODEID_DATA_ROOT=" + f.Dir}, "acquire")
	waitFor(t, 30*time.Second, "the takeover", func() bool { return strings.Contains(holder.out.String(), "acquired node id") })
	f.HangAll()
	t.Cleanup(f.Release)
	px.arm()
	deleteObject(t, srv, "e2e/0.json")
	code := holder.wait(t, 60*time.Second)
	sent, refused, _ := px.creates()
	t.Logf("acquire exited %d; restore creates sent %d (refused %d)", code, sent, refused)
	if !strings.Contains(holder.out.String(), "version=2") {
		t.Fatalf("holder did not hold v2:\n%s", holder.out.String())
	}
	if code != 3 && code != 7 {
		t.Errorf("acquire exited %d, want 3 (lost) or 7 (file system hung)", code)
	}
	rec, err := c.repo().Get(context.Background(), 0)
	switch {
	case errors.Is(err, nodeid.ErrNotFound):
		t.Errorf("acquire (holder of v2, lost, then the file system hung) exited %d without restoring e2e/0.json at its version:\n%s", code, holder.out.String())
	case err != nil:
		t.Fatal(err)
	case rec.Lease.Instance.Version < 2:
		t.Errorf("after the loss 0.json records v%d, below the holder's v2", rec.Lease.Instance.Version)
	}
}
