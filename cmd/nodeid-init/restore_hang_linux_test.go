package main_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
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
	c, srv, px, f, holder := startSlowTakeover(t, 3500*time.Millisecond, "NODEID_FS_TIMEOUT=3s")
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
	checkVersionRestored(t, c, 2, fmt.Sprintf("acquire (holder of v2, lost, then the file system hung) exited %d without restoring e2e/0.json at its version:\n%s", code, holder.out.String()))
}
