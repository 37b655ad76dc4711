package nodeid_test

import (
	"context"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/nodeid"
)

// heldLease is a lease of task at id, renewed for a minute, published at
// addr: live by every rule for the whole test.
func heldLease(task string, id int, addr string) nodeid.Lease {
	return nodeid.Lease{TaskID: task, Instance: nodeid.NodeInstance{ID: id, Version: 1}, Expires: time.Now().Add(time.Minute),
		Duration: time.Minute, Nonce: task + "-nonce", Acquirable: true, Address: addr}
}

// shortLease is heldLease with a lease duration of one second.
func shortLease(task string, id int, addr string) nodeid.Lease {
	l := heldLease(task, id, addr)
	l.Duration, l.Expires = time.Second, time.Now().Add(time.Second)
	return l
}

// checkPeers fails t unless peers is want, peer by peer; a list of another
// length is fatal, a differing peer an error of its own.
func checkPeers(t *testing.T, peers, want []nodeid.Peer) {
	t.Helper()
	if len(peers) != len(want) {
		t.Fatalf("peers %+v, want %+v", peers, want)
	}
	for i := range want {
		if peers[i] != want[i] {
			t.Errorf("peer %d: %+v, want %+v", i, peers[i], want[i])
		}
	}
}

// Issue 23.10: only a live holder is a held peer. A lease recreated on
// behalf of nobody (scale's new ID, a restore after a delete), a lease a
// scale-down and scale-up wrote over its (fenced) holder, and a lease whose
// holder's own duration (1 s) has passed by the server's clock while the
// reader's (a minute) has not are "no-holder" and give no address; a live
// holder's lease is held with its address.
func TestPeersOfPlaceholdersHaveNoHolderAndNoAddress(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		ctx := context.Background()
		repo := rootRepo(t, srv)
		for _, l := range []nodeid.Lease{
			heldLease("live", 0, "10.0.0.1:9093"),
			heldLease("recreated-by:nodeid-init-scale", 1, ""),
			heldLease("fenced", 2, "10.0.0.3:9093"),
		} {
			if _, err := repo.Create(ctx, l); err != nil {
				t.Fatal(err)
			}
		}
		// Scale down past node 2 (its holder's next renewal fails) and
		// up again: the object still names "fenced", written by scale.
		if err := nodeid.Scale(ctx, repo, 2, "nodeid-init-scale", time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := nodeid.Scale(ctx, repo, 3, "nodeid-init-scale", time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := repo.Create(ctx, shortLease("stopped", 3, "10.0.0.4:9093")); err != nil {
			t.Fatal(err)
		}
		// Node 3's holder (L = 1 s) is not renewing: after 3 s of real
		// time, Date - Last-Modified >= 2 s = L + 1 s even if the server
		// rounds one of the two whole-second times the other way
		// (VersityGW's Last-Modified is its file's mtime).
		time.Sleep(3100 * time.Millisecond)
		peers, err := nodeid.ReadPeers(ctx, repo, 4, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		want := []nodeid.Peer{
			{ID: 0, Address: "10.0.0.1:9093", Version: 1, TaskID: "live", State: nodeid.PeerHeld},
			{ID: 1, Version: 1, TaskID: "recreated-by:nodeid-init-scale", State: nodeid.PeerNoHolder},
			{ID: 2, Version: 1, TaskID: "fenced", State: nodeid.PeerNoHolder},
			{ID: 3, Version: 1, TaskID: "stopped", State: nodeid.PeerNoHolder},
		}
		checkPeers(t, peers, want)
	})
}

// Issue 23.11: a task ID this tool never writes (shell syntax in it) makes
// a peer corrupt, with nothing of the object shown; an ECS task ARN and
// Camunda's IDs are peers as before.
func TestPeerWithAHostileTaskIDIsCorrupt(t *testing.T) {
	forEachServer(t, func(t *testing.T, srv *s3test.Server) {
		ctx := context.Background()
		repo := rootRepo(t, srv)
		arn := "arn:aws:ecs:eu-west-1:123456789012:task/my_cluster-1/0123456789abcdef0123456789abcdef"
		for _, l := range []nodeid.Lease{
			heldLease("t$(touch${IFS}PWNED)", 0, "10.0.0.1:9093"),
			heldLease(arn, 1, "10.0.0.2:9093"),
			heldLease("t'\"`x`", 2, "10.0.0.3:9093"),
		} {
			if _, err := repo.Create(ctx, l); err != nil {
				t.Fatal(err)
			}
		}
		peers, err := nodeid.ReadPeers(ctx, repo, 3, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		want := []nodeid.Peer{
			{ID: 0, State: nodeid.PeerCorrupt},
			{ID: 1, Address: "10.0.0.2:9093", Version: 1, TaskID: arn, State: nodeid.PeerHeld},
			{ID: 2, State: nodeid.PeerCorrupt},
		}
		checkPeers(t, peers, want)
	})
}

// Issue 23.11: configuration refuses a task ID with shell syntax; the IDs
// ECS, hostnames, Camunda and the admin commands use pass.
func TestValidateTaskIDAllowsOnlyShellSafeCharacters(t *testing.T) {
	for _, id := range []string{
		"arn:aws:ecs:eu-west-1:123456789012:task/my_cluster-1/0123456789abcdef0123456789abcdef",
		"arn:aws-us-gov:ecs:us-gov-west-1:123456789012:task/c/abc",
		"0123456789abcdef0123456789abcdef", "ip-10-0-1-7.ec2.internal-d53e753b",
		"3f2b8c1e-4d5a-4b6c-9e7f-0a1b2c3d4e5f", "camunda-1", "nodeid-init-scale", "user@host", "a+b=c,d",
	} {
		if err := nodeid.ValidateTaskID(id); err != nil {
			t.Errorf("%q refused: %v", id, err)
		}
	}
	for _, id := range []string{"t$(touch${IFS}PWNED)", "t`x`", "a'b", `a"b`, "a;b", "a b", "a|b", "a&b", "a<b", "a>b",
		"a*b", "a?b", "a[b]", "~a", "a#b", "a!b", "a\\b", "a%b", "a{b}", "tâche", "a\nb", ""} {
		if err := nodeid.ValidateTaskID(id); err == nil {
			t.Errorf("%q accepted", id)
		}
	}
}
