package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
)

// Issue 24.7: without --data-root, a NODE_DATA_DIR that nodeid-init
// inherited is not passed on to the command: it would name a directory
// that is not this tenure's (and that no preparation fenced).
func TestInheritedNodeDataDirIsNotPassedOnWithoutADataRoot(t *testing.T) {
	c := newCluster(t, s3test.NewFake(t), 1)
	stale := filepath.Join(t.TempDir(), "node-0", "v1")
	tk := c.start("t", []string{"NODEID_DATA_ROOT=", "NODE_DATA_DIR=" + stale},
		"run", "--", "sh", "-c", `echo "[${NODE_DATA_DIR-unset}]" > "$REPORT"`)
	if code := tk.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("exit code %d:\n%s", code, tk.out.String())
	}
	b, err := os.ReadFile(tk.report)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != "[unset]" {
		t.Errorf("the command saw NODE_DATA_DIR=%s, want it unset", got)
	}
}
