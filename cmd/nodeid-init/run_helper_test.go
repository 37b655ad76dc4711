package main_test

// From an adversarial review: `run` releases the lease while a member of the child's
// process group still writes the data directory.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
)

// Schedule: the broker (the process group leader under `run`) forks a helper
// and exits 0. design.md, schedule 4, says `run` now kills the whole process
// group, waits until no member is left, syncfs'es and only then releases.
// run.go does not: on `exited` it calls release() at once. The successor
// sees a released lease (previous_graceful=true), hard-links v1 into v2, and
// the helper's late append to v1/data.log lands in the successor's
// v2/data.log (same inode): invariant 3.
func TestRunDoesNotReleaseWhileTheChildsHelperStillWrites(t *testing.T) {
	c := newCluster(t, s3test.StartVersity(t), 1)
	const broker = `echo "written by $NODE_TASK_ID v$NODE_VERSION" >> "$NODE_DATA_DIR/data.log"
(sleep 4; echo "STALE write from v$NODE_VERSION" >> "$NODE_DATA_DIR/data.log") >/dev/null 2>&1 &
exit 0`
	holder := c.start("holder", nil, "run", "--", "sh", "-c", broker)
	if code := holder.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("holder exited %d:\n%s", code, holder.out.String())
	}
	if !strings.Contains(holder.out.String(), "lease released") {
		t.Fatalf("holder did not release:\n%s", holder.out.String())
	}
	helperAlive := exec.Command("pgrep", "-f", "sleep 4").Run() == nil

	succ := c.runTask("successor")
	_, v, graceful := succ.identity(t, 20*time.Second)
	t.Logf("successor took v%d previous_graceful=%v; helper of v1 still alive after the release: %v", v, graceful, helperAlive)

	time.Sleep(5 * time.Second) // the helper's late write
	b, err := os.ReadFile(filepath.Join(c.root, "node-0", "v2", "data.log"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "STALE write from v1") {
		t.Fatalf("the successor's v2/data.log received a write from the released v1's process group:\n%s", b)
	}
}
