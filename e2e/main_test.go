// Package e2e runs real clustered stores under nodeid (issue 27): a
// 3-member etcd cluster and a 3-server ZooKeeper ensemble on loopback, each
// member under `nodeid-init run` with the recipe of docs/recipes.md, its
// data in NODE_DATA_DIR on a shared data root, against VersityGW, with a
// spare task waiting; every scenario is checked with the system's own
// clients (etcdctl, zkCli.sh, four-letter words).
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeid/nodeid/internal/s3test"
)

// nodeidInit is the nodeid-init binary every task runs: the production
// build, no test switches.
var nodeidInit string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "nodeid-e2e-")
	if err != nil {
		panic(err)
	}
	nodeidInit = filepath.Join(dir, "nodeid-init")
	if out, err := exec.Command("go", "build", "-o", nodeidInit, "../cmd/nodeid-init").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build nodeid-init: %v\n%s", err, out)
		os.Exit(1)
	}
	s3test.VersityMain(m)
}

// needTools fails the test when a program or file it runs is missing, with
// the Debian packages to install; outside CI it skips instead, so a
// developer without them can still run the rest. Under CI=true a missing
// etcd must not turn into a green run.
func needTools(t *testing.T, packages string, tools ...string) {
	t.Helper()
	var missing []string
	for _, tool := range tools {
		if strings.HasPrefix(tool, "/") {
			if _, err := os.Stat(tool); err != nil {
				missing = append(missing, tool)
			}
		} else if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := fmt.Sprintf("%s not found: install the Debian packages %s (make test-tools does, as root)", strings.Join(missing, ", "), packages)
	switch strings.ToLower(os.Getenv("CI")) {
	case "", "0", "false":
		t.Skip("SKIPPED: " + msg)
	default:
		t.Fatal(msg)
	}
}
