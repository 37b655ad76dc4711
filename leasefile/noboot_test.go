package leasefile_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodeid/nodeid/clock"
	"github.com/nodeid/nodeid/leasefile"
)

// Schedule: an older nodeid-init (no bootId field) holds node 2 v3 on a host
// whose uptime is 30 days and writes $TMPDIR/nodeid-<uid>/lease.json with
// validUntilBoottimeNs = 30d+lease. The host reboots ($TMPDIR on disk, as
// /tmp is on many hosts and in containers with a volume); CLOCK_BOOTTIME
// restarts near 0. Before the new run rewrites the file (or when it never
// acquires: another task now holds node 2 at v4), health/Check read it: the
// deadline is 30 days ahead on the new boot, and a file without a boot ID is
// "taken to be" of this boot, so Check says valid for a lease the reader
// does not hold (node 2 v3 expired before the reboot). The file as written
// here is exactly what the previous release wrote; we emulate the reboot by
// a deadline far beyond the current CLOCK_BOOTTIME (the pre-reboot uptime).
func TestFileWithoutBootIDFromBeforeARebootIsNotValid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lease.json")
	preRebootUptime := 30 * 24 * time.Hour
	now := clock.SystemBoottime()
	if now > preRebootUptime {
		t.Skip("host uptime exceeds the emulated pre-reboot uptime")
	}
	// Written by the older release, 30 days into the previous boot.
	body := `{"state":"held","nodeId":2,"version":3,"taskId":"old","validUntilBoottimeNs":` +
		itoa(int64(preRebootUptime+15*time.Second)) + "}\n"
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NODE_ID", "2")
	t.Setenv("NODE_VERSION", "3")
	if l, err := leasefile.Check(path); err == nil {
		t.Fatalf("Check says node %d v%d valid for %v after a reboot: the file's deadline is on the previous boot's CLOCK_BOOTTIME (no bootId), the lease expired before the reboot", l.NodeID, l.Version, l.Remaining())
	}
}

func itoa(n int64) string {
	b := []byte{}
	for n > 0 || len(b) == 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(b)
}
