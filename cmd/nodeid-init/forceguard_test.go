package main_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// release runs `release --node N --force` with args and returns its exit
// code and output.
func (c *cluster) release(t *testing.T, node string, args ...string) (int, string) {
	t.Helper()
	tk := c.start("operator", nil, append([]string{"release", "--node", node, "--force"}, args...)...)
	return tk.wait(t, 20*time.Second), tk.out.String()
}

// Issue 23.5: node 0's object is corrupt and the peer on node 1 knows only
// v1 of it, while its last holder may have had a newer one. release
// --force needs --version (or a data root that has the version); on main
// it released at v1.
func TestReleaseOfACorruptObjectNeedsTheVersionEvenIfAPeerKnowsOne(t *testing.T) {
	forBothServers(t, func(t *testing.T, srv *s3test.Server) {
		c := newCluster(t, srv, 2)
		ctx := context.Background()
		if err := nodeid.Initialize(ctx, c.repo(), 2, "boot", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		peer := nodeid.Lease{TaskID: "peer", Instance: nodeid.NodeInstance{ID: 1, Version: 1},
			Expires: time.Now().Add(time.Hour), Duration: 2 * time.Second, Nonce: "n1", Acquirable: true,
			KnownVersions: nodeid.VersionMappings{0: 1}}
		body, meta := peer.Encode()
		replaceObject(t, srv, nodeid.LeaseKey("e2e/", 1), body, meta)
		replaceObject(t, srv, nodeid.LeaseKey("e2e/", 0), []byte("not a lease"), map[string]string{"version": "x"})

		if code, out := c.release(t, "0", "--yes"); code != 2 || !strings.Contains(out, "pass --version V or --data-root DIR") || strings.Count(strings.TrimSpace(out), "\n") > 0 {
			t.Errorf("corrupt object, a peer knows v1, no version: exit %d, want 2 and one line asking for --version:\n%s", code, out)
		}
		if code, out := c.release(t, "0", "--yes", "--data-root", t.TempDir()); code != 2 || !strings.Contains(out, "has no valid node-0/vK") {
			t.Errorf("corrupt object, an empty data root: exit %d, want 2:\n%s", code, out)
		}
		if rec, err := c.repo().Get(ctx, 0); err == nil {
			t.Fatalf("a refused release wrote node 0: %+v", rec.Lease)
		}
		if code, out := c.release(t, "0", "--yes", "--version", "2"); code != 0 || !strings.Contains(out, "released at version 2") {
			t.Errorf("corrupt object, --version 2: exit %d:\n%s", code, out)
		}
	})
}

// Issue 23.4: a corrupt, missing or unusable (scaled-down) object names no
// holder the guard can judge, but its last holder may still be valid: the
// write that made it so landed less than a lease duration + 1 s ago by S3's
// clock (for a missing object nothing tells). release --force refuses
// without --yes (exit 2) and goes ahead with it; a corrupt object written
// long enough ago is released without --yes. On main all three went ahead
// at once.
func TestReleaseForceOfAnUnjudgeableObjectWantsYesWhileItsHolderMayBeValid(t *testing.T) {
	forBothServers(t, func(t *testing.T, srv *s3test.Server) {
		c := newCluster(t, srv, 2)
		ctx := context.Background()
		repo := c.repo()
		if err := nodeid.Initialize(ctx, repo, 2, "boot", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		refusedThenYes := func(what, node string, args ...string) {
			t.Helper()
			if code, out := c.release(t, node, args...); code != 2 || !strings.Contains(out, "its last holder may still be valid; add --yes") {
				t.Errorf("%s without --yes: exit %d, want 2:\n%s", what, code, out)
			}
			if code, out := c.release(t, node, append(args, "--yes")...); code != 0 || !strings.Contains(out, "released at version") {
				t.Errorf("%s with --yes: exit %d, want 0:\n%s", what, code, out)
			}
		}

		replaceObject(t, srv, nodeid.LeaseKey("e2e/", 0), []byte("not a lease"), map[string]string{"version": "x"})
		refusedThenYes("a corrupt object written just now", "0", "--version", "3")

		deleteObject(t, srv, nodeid.LeaseKey("e2e/", 0))
		refusedThenYes("a missing object", "0", "--version", "4")

		if err := nodeid.Scale(ctx, repo, 1, "admin", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		refusedThenYes("an object scaled down just now", "1")

		replaceObject(t, srv, nodeid.LeaseKey("e2e/", 0), []byte("not a lease"), map[string]string{"version": "x"})
		time.Sleep(4 * time.Second) // L = 2 s: past L + 1 s by S3's clock
		if code, out := c.release(t, "0", "--version", "5"); code != 0 || !strings.Contains(out, "released at version 5") {
			t.Errorf("a corrupt object written 4 s ago, without --yes: exit %d, want 0:\n%s", code, out)
		}
	})
}

// Issue 26.4: `release --node 12 --force` on a cluster of 2 created
// 12.json, and status --check failed from then on. A node ID without an
// object outside the cluster (the marker's size) is refused with one line
// and exit 2, dry run or not, and nothing is written; NODEID_CLUSTER_SIZE
// left in the shell does not change that, --cluster-size on the command
// line does. With Camunda's marker (no size) only --cluster-size does.
func TestReleaseRefusesANodeIDOutsideTheCluster(t *testing.T) {
	srv := s3test.StartVersity(t)
	c := newCluster(t, srv, 2)
	ctx := context.Background()
	repo := c.repo()
	if err := nodeid.Initialize(ctx, repo, 2, "boot", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	keys := func() []int {
		l, err := repo.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int
		for _, s := range l.Slots {
			ids = append(ids, s.ID)
		}
		return ids
	}
	refused := func(what, want string, env []string, args ...string) {
		t.Helper()
		code, stdout, stderr := c.runCmd(t, env, append([]string{"release", "--force", "--yes", "--version", "1"}, args...)...)
		if code != 2 || stdout != "" {
			t.Errorf("%s: exit %d, want 2:\n%s%s", what, code, stdout, stderr)
		}
		oneLineWith(t, what, stderr, want)
		if ids := keys(); len(ids) != 2 || ids[0] != 0 || ids[1] != 1 {
			t.Fatalf("%s: lease objects %v after a refused release, want [0 1]", what, ids)
		}
	}
	refused("--node 12", "nodeid-init release: node 12 is outside the cluster: its marker records 2 node IDs (0..1)", nil, "--node", "12")
	refused("--node 2 --dry-run", "node 2 is outside the cluster", nil, "--node", "2", "--dry-run")
	refused("--node 12 with NODEID_CLUSTER_SIZE=13", "node 12 is outside the cluster", []string{"NODEID_CLUSTER_SIZE=13"}, "--node", "12")
	refused("--node 12 --cluster-size 12", "node 12 is outside the cluster: --cluster-size 12 has node IDs 0..11", nil, "--node", "12", "--cluster-size", "12")

	// The operator's word: the cluster has 13 IDs.
	if code, stdout, stderr := c.runCmd(t, nil, "release", "--force", "--yes", "--version", "1", "--node", "12", "--cluster-size", "13"); code != 0 || !strings.Contains(stdout, "node 12 released at version 1") {
		t.Errorf("--node 12 --cluster-size 13: exit %d, want 0:\n%s%s", code, stdout, stderr)
	}

	// Camunda's marker records no size.
	camundaCluster := newCluster(t, srv, 2)
	camundaEnv := []string{"NODEID_PREFIX=camunda/"}
	putObject(t, srv, "camunda/node-ids-initialized", "", nil)
	code, stdout, stderr := camundaCluster.runCmd(t, camundaEnv, "release", "--force", "--yes", "--version", "1", "--node", "1")
	if code != 2 {
		t.Errorf("--node 1 under Camunda's marker: exit %d, want 2:\n%s%s", code, stdout, stderr)
	}
	oneLineWith(t, "--node 1 under Camunda's marker", stderr, "records no cluster size")
	// Inside the cluster, Camunda's marker alone is the Camunda guard's
	// business (camunda_spare_release_test.go): refused without the flag.
	code, stdout, stderr = camundaCluster.runCmd(t, camundaEnv, "release", "--force", "--yes", "--version", "1", "--node", "1", "--cluster-size", "2")
	if code != 2 {
		t.Errorf("--node 1 --cluster-size 2 under Camunda's marker without --camunda-graceful-ok: exit %d, want 2:\n%s%s", code, stdout, stderr)
	}
	oneLineWith(t, "--node 1 --cluster-size 2 under Camunda's marker", stderr, "holds Camunda's cluster marker camunda/node-ids-initialized")
	if code, stdout, stderr := camundaCluster.runCmd(t, camundaEnv, "release", "--force", "--yes", "--camunda-graceful-ok", "--version", "1", "--node", "1", "--cluster-size", "2"); code != 0 {
		t.Errorf("--node 1 --cluster-size 2 --camunda-graceful-ok under Camunda's marker: exit %d, want 0:\n%s%s", code, stdout, stderr)
	}
}
