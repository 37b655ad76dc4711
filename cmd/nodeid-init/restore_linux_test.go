package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/efsfs"
	"github.com/nodeid/nodeid/internal/s3test"
)

// The ECS init container must not exit on a loss during the preparation
// before the provider has restored the deleted object's version: cmdAcquire
// once returned the loss at once, and the process exited while the restore
// was still retrying within its deadline; the next holder then started
// again from a lower version.
//
// Schedule (L = 8 s, R = 2 s):
//   - a dead holder left v1 with 400 files on a data root whose every
//     metadata operation costs 10 ms: copying v1 takes seconds, longer
//     than R, whatever the machine.
//   - `acquire` takes v2 and starts copying; someone deletes e2e/0.json.
//   - the renewal finds it gone: loseRestoring -> recreateDeleted, whose
//     creates meet 503 SlowDown for 3 s; the loss cancels the preparation.
//   - acquire must exit 3 only once 0.json is back at v2.
func TestLossDuringTheInitContainersPreparationStillRestoresTheVersion(t *testing.T) {
	c, srv, px, _, holder := startSlowTakeover(t, 3*time.Second)
	px.arm()
	deleteObject(t, srv, "e2e/0.json")
	code := holder.wait(t, 60*time.Second)
	sent, refused, _ := px.creates()
	t.Logf("acquire exited %d; restore creates sent %d (refused %d)", code, sent, refused)
	if code != 3 {
		t.Fatalf("acquire exited %d, want 3 (lost during the preparation):\n%s", code, holder.out.String())
	}
	checkVersionRestored(t, c, 2, "acquire (holder of v2, lost while preparing) exited without restoring e2e/0.json at its version:\n"+holder.out.String())
}

// The same loss leaves the init container's lease file saying `lost`:
// acquire closed its held directory before it waited for the loss to be
// handled, and the provider's `lost` write, after the restore, found it
// closed; `health` passed on `held` until the old deadline.
func TestLossDuringTheInitContainersPreparationLeavesTheLeaseFileSayingLost(t *testing.T) {
	leaseFile := filepath.Join(t.TempDir(), "lease.json")
	_, srv, px, _, holder := startSlowTakeover(t, 3*time.Second, "NODEID_LEASE_FILE="+leaseFile)
	px.arm()
	deleteObject(t, srv, "e2e/0.json")
	if code := holder.wait(t, 60*time.Second); code != 3 {
		t.Fatalf("acquire exited %d, want 3 (lost during the preparation):\n%s", code, holder.out.String())
	}
	checkLeaseFileSaysLost(t, leaseFile, holder.out.String())
}

// startSlowTakeover starts `acquire` (L = 8 s, R = 2 s, and env) taking
// over node 0 from a dead holder of v1 whose 400 files sit on a data root
// where every metadata operation costs 10 ms, so the preparation runs for
// seconds. S3 is reached through a restore proxy that, once armed, answers
// the restore's creates of 0.json with 503 for burst. It returns once the
// takeover is logged.
func startSlowTakeover(t *testing.T, burst time.Duration, env ...string) (*cluster, *s3test.Server, *restoreProxy, *efsfs.FS, *task) {
	t.Helper()
	f := efsfs.MountT(t, efsfs.Profile{Meta: 10 * time.Millisecond})
	srv := s3test.StartVersity(t)
	c := newCluster(t, srv, 1)
	c.env = append(c.env, "NODEID_LEASE_DURATION=8s", "NODEID_RENEW_INTERVAL=2s")
	c.env = append(c.env, env...)
	v1 := c.deadHolderOfV1Leasing(t, f.Backing, 8*time.Second)
	for i := range 400 {
		if err := os.WriteFile(filepath.Join(v1, fmt.Sprintf("f%03d", i)), []byte("data"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	px := newRestoreProxy(t, srv.URL, "e2e/0.json", 0, burst)
	envFile := filepath.Join(t.TempDir(), "node.env")
	holder := c.start("holder", []string{"AWS_ENDPOINT_URL_S3=" + px.URL, "NODEID_ENV_FILE=" + envFile, "NODEID_DATA_ROOT=" + f.Dir}, "acquire")
	waitFor(t, 30*time.Second, "the takeover", func() bool { return strings.Contains(holder.out.String(), "acquired node id") })
	return c, srv, px, f, holder
}
