package main_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
	"github.com/nodeid/nodeid/leasefile"
	"github.com/nodeid/nodeid/nodeid"
)

// restoreProxy sits between one nodeid-init and the S3 server. Until armed
// it passes everything. Once armed it delays every GET except those of
// ownKey (a slow S3 for the peers table: LIST, marker and the other lease
// objects), and answers 503 SlowDown to the creates (If-None-Match: *) of
// ownKey for burst after the first one: the restore of a deleted object
// meets a short SlowDown burst, well inside the holder's deadline.
type restoreProxy struct {
	URL    string
	ownKey string
	delay  time.Duration
	burst  time.Duration

	created chan struct{} // closed at the first create of ownKey once armed

	mu            sync.Mutex
	armed         bool
	firstCreate   time.Time
	refused, sent int
}

func newRestoreProxy(t *testing.T, target, ownKey string, delay, burst time.Duration) *restoreProxy {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := &restoreProxy{ownKey: ownKey, delay: delay, burst: burst, created: make(chan struct{})}
	fwd := httputil.NewSingleHostReverseProxy(u) // keeps the signed Host header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		own := strings.HasSuffix(r.URL.Path, "/"+ownKey)
		rp.mu.Lock()
		armed := rp.armed
		refuse := false
		if armed && own && r.Method == http.MethodPut && r.Header.Get("If-None-Match") == "*" {
			rp.sent++
			if rp.firstCreate.IsZero() {
				rp.firstCreate = time.Now()
				close(rp.created)
			}
			if time.Since(rp.firstCreate) < rp.burst {
				refuse = true
				rp.refused++
			}
		}
		rp.mu.Unlock()
		switch {
		case refuse:
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`))
			return
		case armed && r.Method == http.MethodGet && !own:
			select {
			case <-time.After(rp.delay):
			case <-rp.created: // the slow phase ends when the restore begins
			case <-r.Context().Done():
				return
			}
		}
		fwd.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	rp.URL = srv.URL
	return rp
}

func (rp *restoreProxy) arm() {
	rp.mu.Lock()
	rp.armed = true
	rp.mu.Unlock()
}

func (rp *restoreProxy) creates() (sent, refused int, first time.Time) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return rp.sent, rp.refused, rp.firstCreate
}

// A loss before the command started must not exit before the provider's
// restore of a deleted object's version: run once waited for it only when
// the command ran (lost -> awaitLossHandled), and a loss during
// prepareDataDir, beforeStart or the check before the start returned at
// once, while the restore, which runs after OnFence on the provider's
// goroutine, was still retrying within its deadline. With one holder's version known to nobody
// else (here: ID 0, the only ID any task may take), the object stays
// missing, a spare recreates it at version 1 and takes version 2 after the
// holder had version 3: the version of node 0 goes down (invariant 2).
//
// Schedule (L = 8 s, R = 2 s, T = 1 s, m = 1.6 s):
//   - a and b run and release node 0 (v1, v2); holder takes v3 (graceful).
//   - holder logs "acquired node id" and reads the peers table
//     (beforeStart -> ReadPeers): S3 answers its GETs slowly (up to 0.8 s
//     each, within T), so the table takes until after the renewal below.
//   - right after the acquisition, someone deletes e2e/0.json.
//   - at s + R the renewal finds it gone: loseRestoring -> OnFence (no
//     command yet) -> recreateDeleted: its create meets 503 SlowDown for
//     3 s (a burst that ends 1.4 s before the holder's deadline); S3 now
//     answers the peers table's GETs at once.
//   - ReadPeers returns; run sees the loss before the start and returns
//     exit 3 at once; the process exits while the restore waits to retry.
//   - a spare finds 0.json missing, recreates it as an expiring lease at
//     version 1 (the highest any lease records), and after L + 1 s takes
//     version 2.
func TestLossBeforeTheCommandStartsStillRestoresTheDeletedObjectsVersion(t *testing.T) {
	srv := s3test.StartVersity(t)
	c := newCluster(t, srv, 5)
	c.env = append(c.env, "NODEID_ALLOWED_IDS=0", "NODEID_LEASE_DURATION=8s", "NODEID_RENEW_INTERVAL=2s")
	for _, name := range []string{"a", "b"} {
		if code := c.start(name, nil, "run", "--", "sh", "-c", "exit 0").wait(t, 30*time.Second); code != 0 {
			t.Fatalf("%s exited %d", name, code)
		}
	}
	px := newRestoreProxy(t, srv.URL, "e2e/0.json", 800*time.Millisecond, 3*time.Second)
	holder := c.start("holder", []string{"AWS_ENDPOINT_URL_S3=" + px.URL}, "run", "--", "sh", "-c", childScript)
	waitFor := func(what string, timeout time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s:\n%s", what, holder.out.String())
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	waitFor("the acquisition", 30*time.Second, func() bool { return strings.Contains(holder.out.String(), "acquired node id") })
	px.arm()
	deleteObject(t, srv, "e2e/0.json")
	code := holder.wait(t, 20*time.Second)
	exited := time.Now()
	sent, refused, first := px.creates()
	t.Logf("holder exited %d; restore creates sent %d (refused %d), the first %v before the exit", code, sent, refused, exited.Sub(first).Round(time.Millisecond))
	if !strings.Contains(holder.out.String(), "version=3") {
		t.Fatalf("holder did not hold v3:\n%s", holder.out.String())
	}

	checkVersionRestored(t, c, 3, fmt.Sprintf("run (holder of v3, lost before its command started) exited %d without restoring e2e/0.json at its version: the restore was still retrying within its deadline", code))

	// What it costs: the next holder of node 0 (the data root, if any,
	// then refuses the version: exit 6; without one the broker runs on it).
	spare := c.runTask("spare")
	var line string
	deadline := time.Now().Add(40 * time.Second)
	for line == "" && time.Now().Before(deadline) {
		for _, l := range strings.Split(spare.out.String(), "\n") {
			if strings.Contains(l, "acquired node id") {
				line = l
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if line == "" {
		t.Fatalf("spare acquired nothing:\n%s", spare.out.String())
	}
	if !strings.Contains(line, "version=4") {
		t.Errorf("after the holder of v3, the spare %s (a node's version never decreases, never repeats)", strings.TrimSpace(line[strings.Index(line, "msg="):]))
	}
}

// A clean stop must wait for the restore a release may start: run released
// through closeProvider with a fixed 10 s bound (renew's SIGTERM path and
// giveBack too), but a release that finds the object deleted or replaced
// below our version restores the version in recreateDeleted, bounded only
// by the holder's deadline, up to L - m after the last renewal. With L - m
// above 10 s the process exited while the restore was still retrying, and
// the version was gone (as in the test above). releaseContext now bounds
// the release by the deadline.
//
// Schedule (L = 30 s, R = 10 s, m = 6 s: deadline s + 24 s; the default
// L = 15 s leaves 12 s, above the 10 s too):
//   - a runs and releases node 0 (v1); holder takes v2 and runs a command
//     that exits after 1 s.
//   - meanwhile someone deletes e2e/0.json.
//   - the command exits; run kills and syncs, then releases: 404 ->
//     recreateDeleted; S3 answers its creates 503 SlowDown for 12 s.
//   - Close gives up after 10 s ("release did not finish in time"), run
//     returns, the process exits about 13 s before its deadline; the
//     restore, which would have landed once the burst ended, never does.
func TestCleanStopWaitsForTheRestoreOfADeletedObjectsVersion(t *testing.T) {
	srv := s3test.StartVersity(t)
	c := newCluster(t, srv, 1)
	c.env = append(c.env, "NODEID_LEASE_DURATION=30s", "NODEID_RENEW_INTERVAL=10s")
	if code := c.start("a", nil, "run", "--", "sh", "-c", "exit 0").wait(t, 30*time.Second); code != 0 {
		t.Fatalf("a exited %d", code)
	}
	px := newRestoreProxy(t, srv.URL, "e2e/0.json", 0, 12*time.Second)
	holder := c.start("holder", []string{"AWS_ENDPOINT_URL_S3=" + px.URL}, "run", "--", "sh", "-c", "sleep 1; exit 0")
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(holder.out.String(), "command started") {
		if time.Now().After(deadline) {
			t.Fatalf("no command started:\n%s", holder.out.String())
		}
		time.Sleep(2 * time.Millisecond)
	}
	px.arm()
	deleteObject(t, srv, "e2e/0.json")
	code := holder.wait(t, 40*time.Second)
	exited := time.Now()
	sent, refused, first := px.creates()
	t.Logf("holder exited %d; restore creates sent %d (refused %d), the first %v before the exit", code, sent, refused, exited.Sub(first).Round(time.Millisecond))
	if !strings.Contains(holder.out.String(), "version=2") {
		t.Fatalf("holder did not hold v2:\n%s", holder.out.String())
	}
	checkVersionRestored(t, c, 2, fmt.Sprintf("run (holder of v2) exited %d %v after its first restore attempt, about %v before its deadline, without restoring e2e/0.json at its version", code, exited.Sub(first).Round(time.Second), (24*time.Second-exited.Sub(first)).Round(time.Second)))
}

// checkVersionRestored fails t unless node 0's object exists and records
// at least version want; missing is the error for a missing object.
func checkVersionRestored(t *testing.T, c *cluster, want nodeid.Version, missing string) {
	t.Helper()
	rec, err := c.repo().Get(context.Background(), 0)
	switch {
	case errors.Is(err, nodeid.ErrNotFound):
		t.Error(missing)
	case err != nil:
		t.Fatal(err)
	case rec.Lease.Instance.Version < want:
		t.Errorf("after the loss 0.json records v%d, below the holder's v%d", rec.Lease.Instance.Version, want)
	}
}

// A loss before the command starts leaves the lease file saying `lost`:
// run closed the held lease-file directory (closeOutputs) before it waited
// for the provider to finish the loss (awaitLossHandled), and the
// provider's `lost` write, which comes after its restore, found the
// directory closed. The file kept saying `held` until its deadline, and
// `nodeid-init health` passed meanwhile on a lease already lost.
//
// Schedule as in the test above (L = 8 s, R = 2 s): the peers table is
// read slowly before the start, 0.json is deleted, the renewal loses it,
// and the restore meets 503 for 3 s; run returns on the loss at once.
func TestALossBeforeTheCommandStartsLeavesTheLeaseFileSayingLost(t *testing.T) {
	srv := s3test.StartVersity(t)
	c := newCluster(t, srv, 5) // five peers to read, slowly: past the renewal
	c.env = append(c.env, "NODEID_ALLOWED_IDS=0", "NODEID_LEASE_DURATION=8s", "NODEID_RENEW_INTERVAL=2s")
	leaseFile := filepath.Join(t.TempDir(), "lease.json")
	px := newRestoreProxy(t, srv.URL, "e2e/0.json", 800*time.Millisecond, 3*time.Second)
	holder := c.start("holder", []string{"AWS_ENDPOINT_URL_S3=" + px.URL, "NODEID_LEASE_FILE=" + leaseFile}, "run", "--", "sh", "-c", childScript)
	waitFor(t, 30*time.Second, "the acquisition", func() bool { return strings.Contains(holder.out.String(), "acquired node id") })
	px.arm()
	deleteObject(t, srv, "e2e/0.json")
	if code := holder.wait(t, 20*time.Second); code != 3 {
		t.Fatalf("holder exited %d, want 3 (lost before its command started):\n%s", code, holder.out.String())
	}
	if _, err := os.Stat(holder.report); err == nil {
		t.Fatal("the command started although the lease was lost before")
	}
	checkLeaseFileSaysLost(t, leaseFile, holder.out.String())
}

// checkLeaseFileSaysLost checks, once the process exited, that its lease
// file says `lost` and `health` fails on it.
func checkLeaseFileSaysLost(t *testing.T, leaseFile, out string) {
	t.Helper()
	l, err := leasefile.Read(leaseFile)
	if err != nil {
		t.Fatal(err)
	}
	if l.State != leasefile.StateLost {
		t.Errorf("after the loss the lease file says %q (valid %v), want %q:\n%s", l.State, l.Valid(), leasefile.StateLost, out)
	}
	if b, err := exec.Command(binary, "health", "--lease-file", leaseFile).CombinedOutput(); err == nil {
		t.Errorf("health passes on the lease file of a lost lease:\n%s", b)
	}
}
