package main_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/leasefile"
)

// The production build (no -tags nodeidtest) has no test switches: with
// NODEID_TEST_LEASE_FILE_FAIL set it writes the lease file and starts the
// command (the test build refuses to: TestFirstLeaseFileWriteFailingNeverStartsTheCommand),
// and an invalid NODEID_TEST_CLOCK_OFFSET, a usage error in the test build,
// is not even read.
func TestProductionBuildIgnoresTheTestSwitches(t *testing.T) {
	prod := filepath.Join(t.TempDir(), "nodeid-init")
	if out, err := exec.Command("go", "build", "-o", prod, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	c := newCluster(t, s3test.StartVersity(t), 1)
	leaseFile := filepath.Join(t.TempDir(), "lease.json")
	tk := c.startProgram("prod", []string{"NODEID_TEST_LEASE_FILE_FAIL=1", "NODEID_TEST_CLOCK_OFFSET=not-a-duration", "NODEID_LEASE_FILE=" + leaseFile},
		prod, "run", "--", "sh", "-c", childScript)
	tk.identity(t, 20*time.Second)
	if _, err := leasefile.Check(leaseFile); err != nil {
		t.Fatalf("lease file: %v\n%s", err, tk.out.String())
	}
	if out := tk.out.String(); strings.Contains(out, "NODEID_TEST") || strings.Contains(out, "test setting") {
		t.Fatalf("the production build read a test switch:\n%s", out)
	}
}
