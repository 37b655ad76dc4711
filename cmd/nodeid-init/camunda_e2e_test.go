package main_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nodeid/nodeid/internal/camunda"
	"github.com/nodeid/nodeid/internal/s3test"
)

// Issue 12, end to end: a bucket and a data root exactly as a Camunda 8.9
// cluster of three leaves them are taken over by three `nodeid-init run`
// tasks (VersityGW, zeebe preset, default retention); everything they write
// must read correctly under Camunda's rules (our strict model and the real
// Jackson), and after a graceful stop Camunda brokers take the IDs back.
//
// What Camunda left:
//
//	bucket (keys at the root)           data root
//	0.json  released at v2 (empty)      node-0/v1, v2 valid (v2 newest)
//	1.json  held by a dead task, v4     node-1/v1..v4 valid, v0 half-copied (no marker)
//	2.json  bootstrap (empty, no meta)  node-2/ empty
//	node-ids-initialized (empty)
//
// Expected: node 0 -> v3 from v2, node 1 -> v5 from v4, node 2 -> v1 empty;
// the new versions hold every file of their source but runtime segments;
// retention (NODEID_KEEP_VERSIONS default 2, the current version counting,
// docs/datadir.md "Garbage collection") removes node-0/v1 and node-1/v1..v3
// and nothing else of Camunda's, except in the node of the task that claimed
// the root: that preparation runs no GC (docs/datadir.md "Ownership"); the
// half-copied node-1/v0 is not ours and stays.
func TestCamundaClusterIsTakenOverAndHandedBack(t *testing.T) {
	testStart := time.Now()
	srv := s3test.StartVersity(t)
	client := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newCluster(t, srv, 3)

	// 1. The bucket.
	if err := camunda.Bootstrap(ctx, client, srv.Bucket, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := camunda.WriteReleased(ctx, client, srv.Bucket, 0, 2, true); err != nil {
		t.Fatal(err)
	}
	deadExpiry := time.Now().Add(-10 * time.Minute)
	if _, err := camunda.WriteHeld(ctx, client, srv.Bucket, 1, "camunda-dead-task", 4, deadExpiry, map[int32]int64{0: 2, 1: 4}); err != nil {
		t.Fatal(err)
	}
	markerBefore := getObject(ctx, t, client, srv.Bucket, camunda.InitializedMarkerKey)
	if len(markerBefore.body) != 0 {
		t.Fatalf("Camunda's marker has a body: %q", markerBefore.body)
	}
	// What Camunda itself reads, before anyone else writes: the setup is
	// what it means to be.
	for id, want := range []string{"Uninitialized v2 acquirable=true",
		`Initialized task="camunda-dead-task" node=1 v4 ts=` + strconv.FormatInt(deadExpiry.UnixMilli(), 10) + ` acquirable=true known={0:2,1:4}`,
		"Uninitialized v0 acquirable=true"} {
		s, _, err := camunda.Get(ctx, client, srv.Bucket, id, 0)
		if err != nil || s.String() != want {
			t.Fatalf("setup: Camunda reads %s as %s (%v), want %s", camunda.Key(id), s, err, want)
		}
	}

	// 2. The data root.
	root := c.root
	lay := camundaLayer{t: t, root: root}
	lay.version(0, 1, nil, map[string]string{
		"snapshots/1-1-10-9/000010.sst":           "n0 snapshot 10",
		"snapshots/1-1-10-9/CHECKSUM":             "n0 checksum 10",
		"raft-partition/partitions/1/journal.log": "n0 journal as of v1",
		"runtime/000012.sst":                      "n0 runtime v1",
		"runtime/CURRENT":                         "MANIFEST-000001",
	})
	lay.version(0, 2, new(int64(1)), map[string]string{
		"snapshots/1-1-20-19/000020.sst":          "n0 snapshot 20",
		"snapshots/1-1-20-19/CHECKSUM":            "n0 checksum 20",
		"bootstrap-snapshots/1/000001.sst":        "n0 bootstrap snapshot",
		"raft-partition/partitions/1/journal.log": "n0 journal as of v2, longer than before",
		"raft-partition/partitions/1/.conf":       "n0 raft configuration",
		"raft-partition/partitions/1/meta":        "n0 raft meta",
		"raft-partition/partitions/1/runtime/db":  "n0 nested runtime segment",
		"runtime/000021.sst":                      "n0 runtime v2",
		"runtime/CURRENT":                         "MANIFEST-000002",
		"runtime/OPTIONS-000007":                  "n0 rocksdb options",
	})
	// Camunda's copier hard-links snapshots into the next version, and
	// RocksDB checkpoints hard-link runtime files into a snapshot.
	lay.link("node-0/v1/snapshots/1-1-10-9/000010.sst", "node-0/v2/snapshots/1-1-10-9/000010.sst")
	lay.link("node-0/v1/snapshots/1-1-10-9/CHECKSUM", "node-0/v2/snapshots/1-1-10-9/CHECKSUM")
	lay.link("node-0/v2/snapshots/1-1-20-19/000020.sst", "node-0/v2/runtime/000020.sst")
	lay.mkdir("node-0/v2/raft-partition/partitions/2") // an empty directory
	for v := int64(1); v <= 4; v++ {
		var from *int64
		if v > 1 {
			from = new(v - 1)
		}
		files := map[string]string{
			fmt.Sprintf("snapshots/1-%d-5-4/000042.sst", v): fmt.Sprintf("n1 snapshot of v%d", v),
			fmt.Sprintf("snapshots/1-%d-5-4/CHECKSUM", v):   fmt.Sprintf("n1 checksum of v%d", v),
			"raft-partition/partitions/1/journal.log":       fmt.Sprintf("n1 journal as of v%d", v),
			"raft-partition/partitions/2/journal.log":       fmt.Sprintf("n1 p2 journal as of v%d", v),
			"runtime/CURRENT":                      fmt.Sprintf("MANIFEST-%06d", v),
			fmt.Sprintf("runtime/%06d.sst", 100+v): fmt.Sprintf("n1 runtime of v%d", v),
		}
		lay.version(1, v, from, files)
		for w := int64(1); w < v; w++ {
			rel := fmt.Sprintf("snapshots/1-%d-5-4/000042.sst", w)
			lay.link(fmt.Sprintf("node-1/v%d/%s", v-1, rel), fmt.Sprintf("node-1/v%d/%s", v, rel))
		}
	}
	// A copy Camunda never finished: no marker. Not ours, so it must stay.
	lay.files("node-1/v0", map[string]string{
		"snapshots/1-0-1-1/000001.sst":            "n1 half-copied snapshot",
		"raft-partition/partitions/1/journal.log": "n1 half-copied jour",
	})
	lay.mkdir("node-2")
	camundaTree := scanTree(t, root)

	// 3. Three nodeid-init tasks.
	env := []string{"NODEID_PREFIX=", "NODEID_DATA_PRESET=zeebe"}
	const child = `printf '%s\n' "$NODE_DATA_DIR" > "$REPORT.dir"; echo "$NODE_ID $NODE_VERSION $NODE_PREVIOUS_GRACEFUL" > "$REPORT"; exec sleep 300`
	var tasks []*task
	for i := range 3 {
		tasks = append(tasks, c.start(fmt.Sprintf("nodeid-task-%d", i), env, "run", "--", "sh", "-c", child))
	}
	type holding struct {
		task     *task
		version  int64
		graceful bool
		dir      string
	}
	held := map[int]holding{}
	for _, tk := range tasks {
		id, v, graceful := tk.identity(t, 45*time.Second)
		dir, err := os.ReadFile(tk.report + ".dir")
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := held[id]; dup {
			t.Fatalf("%s got node %d, already held by %s", tk.name, id, held[id].task.name)
		}
		held[id] = holding{tk, int64(v), graceful, strings.TrimSpace(string(dir))}
	}
	t.Logf("all three hold an ID after %v", time.Since(testStart).Round(time.Millisecond))
	wantVersion := map[int]int64{0: 3, 1: 5, 2: 1}
	for id, h := range held {
		t.Logf("node %d: %s v%d previous_graceful=%v dir=%s", id, h.task.name, h.version, h.graceful, h.dir)
		if want := wantVersion[id]; h.version != want {
			t.Errorf("node %d: version %d, want %d (Camunda's version + 1)", id, h.version, want)
		}
		if want := filepath.Join(root, fmt.Sprintf("node-%d", id), fmt.Sprintf("v%d", h.version)); h.dir != want {
			t.Errorf("node %d: NODE_DATA_DIR %s, want %s", id, h.dir, want)
		}
		// An empty body proves nothing about what came before it
		// (docs/design.md, "Objects"): neither Camunda's release nor its
		// dead holder is a graceful predecessor.
		if id != 2 && h.graceful {
			t.Errorf("node %d: NODE_PREVIOUS_GRACEFUL=true after Camunda's empty release or dead holder", id)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// The data root while held.
	now := scanTree(t, root)
	claimer := -1
	for id, h := range held {
		if strings.Contains(h.task.out.String(), "data root claimed for this cluster") {
			if claimer >= 0 {
				t.Errorf("nodes %d and %d both claimed the data root", claimer, id)
			}
			claimer = id
		}
	}
	if claimer < 0 {
		t.Fatal("no task claimed the data root")
	}
	checkCamundaRetention(t, camundaTree, now, claimer)
	checkCarriedOver(t, now, camundaTree, "node-0/v2", "node-0/v3")
	checkCarriedOver(t, now, camundaTree, "node-1/v4", "node-1/v5")
	if got := now.under("node-2/v1"); !slices.Equal(got, []string{"node-2/v1/directory-initialized.json"}) {
		t.Errorf("node-2/v1 holds %v, want only its marker", got)
	}
	checkMarkers(t, root, now, testStart, map[string]*int64{"node-0/v3": new(int64(2)), "node-1/v5": new(int64(4)), "node-2/v1": nil})

	// The bucket while held: Camunda reads each lease as held by our task.
	checkBucket(ctx, t, client, srv.Bucket, markerBefore.etag, func(id int, s camunda.Stored) error {
		h := held[id]
		switch {
		case !s.Initialized || s.TaskID != h.task.name || s.Version != h.version || int(s.NodeID) != id || !s.Acquirable:
			return fmt.Errorf("want Initialized, held by %s at v%d", h.task.name, h.version)
		case !s.ValidAt(time.Now().UnixMilli()):
			return fmt.Errorf("expired at %d by our clock: a Camunda broker would take it", s.Expiry)
		}
		for k, v := range s.Known {
			if v == nil || *v > held[int(k)].version || (int(k) == id && *v != h.version) {
				return fmt.Errorf("knownVersionMappings %d:%s does not match the versions held", k, fmtVersion(v))
			}
		}
		return nil
	})
	// And so a Camunda broker started now finds nothing to take.
	intruder := &camunda.Broker{Client: client, Bucket: srv.Bucket, TaskID: "camunda-intruder", N: 3, LeaseDuration: 15 * time.Second}
	if id, v, err := intruder.Acquire(ctx); !errors.Is(err, camunda.ErrNoLease) {
		t.Fatalf("a Camunda broker, while our tasks hold every ID: node %d v%d, %v; want ErrNoLease", id, v, err)
	}

	// Graceful stop.
	for id, h := range held {
		if err := h.task.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatalf("node %d: %v", id, err)
		}
	}
	for id, h := range held {
		if code := h.task.wait(t, 30*time.Second); code != 0 {
			t.Errorf("node %d: %s exited %d after SIGTERM, want 0", id, h.task.name, code)
		}
		if !strings.Contains(h.task.out.String(), "lease released") {
			t.Errorf("node %d: %s did not log its release:\n%s", id, h.task.name, h.task.out.String())
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	checkBucket(ctx, t, client, srv.Bucket, markerBefore.etag, func(id int, s camunda.Stored) error {
		if s.Initialized || s.Version != held[id].version || !s.Acquirable {
			return fmt.Errorf("want Uninitialized, acquirable, at the version kept (%d)", held[id].version)
		}
		return nil
	})
	if after := scanTree(t, root); !maps.Equal(after.entries, now.entries) {
		t.Errorf("the data root changed when the tasks stopped:\n%s", diffTrees(now, after))
	}

	// 4. Back to Camunda: its brokers take every released ID at version+1.
	var brokers []*camunda.Broker
	for i := range 3 {
		b := &camunda.Broker{Client: client, Bucket: srv.Bucket, TaskID: fmt.Sprintf("camunda-back-%d", i), N: 3, LeaseDuration: 15 * time.Second}
		id, v, err := b.Acquire(ctx)
		if err != nil {
			t.Fatalf("Camunda broker %d after our graceful stop: %v", i, err)
		}
		// Acquire goes through the IDs in order, taking the first free one.
		if id != i || v != held[i].version+1 {
			t.Errorf("Camunda broker %d took node %d v%d, want node %d v%d", i, id, v, i, held[i].version+1)
		}
		s, _, err := camunda.Get(ctx, client, srv.Bucket, id, 0)
		if err != nil || !s.Initialized || s.TaskID != b.TaskID || s.Version != v {
			t.Errorf("node %d after Camunda's take: %s, %v", id, s, err)
		}
		brokers = append(brokers, b)
	}
	for i, b := range brokers {
		if err := b.Release(ctx); err != nil {
			t.Errorf("Camunda broker %d release: %v", i, err)
		}
	}
	t.Logf("took %v", time.Since(testStart).Round(time.Millisecond))
}

func fmtVersion(v *int64) string {
	if v == nil {
		return "null"
	}
	return strconv.FormatInt(*v, 10)
}

type s3Object struct {
	body []byte
	meta map[string]string
	etag string
}

func getObject(ctx context.Context, t *testing.T, client *s3.Client, bucket, key string) s3Object {
	t.Helper()
	out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer out.Body.Close()
	body, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return s3Object{body, out.Metadata, aws.ToString(out.ETag)}
}

var leaseKeyRE = regexp.MustCompile(`^([0-9]+)\.json$`)

// checkBucket lists the bucket: lease objects must be exactly 0..2.json, the
// marker must be Camunda's, unchanged, and nothing else but our probe
// objects may be there. Every lease must read under Camunda's rules, our
// model and Jackson agreeing, and pass check.
func checkBucket(ctx context.Context, t *testing.T, client *s3.Client, bucket, markerETag string, check func(id int, s camunda.Stored) error) {
	t.Helper()
	out, err := client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	var others []string
	for _, o := range out.Contents {
		key := aws.ToString(o.Key)
		switch m := leaseKeyRE.FindStringSubmatch(key); {
		case m != nil:
			id, _ := strconv.Atoi(m[1])
			ids = append(ids, id)
		case key == camunda.InitializedMarkerKey:
		case strings.HasPrefix(key, "nodeid-probe-") && strings.HasSuffix(key, ".json"):
			others = append(others, key) // the start-up probe's; Camunda never reads them
		case strings.HasPrefix(key, "nodeid-tenures/") || key == "nodeid-released":
			// Tenure objects and the release hint: Camunda counts only
			// keys matching \d+\.json, so it never reads them.
			others = append(others, key)
		default:
			t.Errorf("unexpected object %q in the bucket", key)
		}
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []int{0, 1, 2}) {
		t.Fatalf("lease objects %v, want 0.json, 1.json, 2.json", ids)
	}
	t.Logf("other objects in the bucket: %v", others)
	if m := getObject(ctx, t, client, bucket, camunda.InitializedMarkerKey); len(m.body) != 0 || m.etag != markerETag {
		t.Errorf("%s changed: body %q, ETag %s (was %s)", camunda.InitializedMarkerKey, m.body, m.etag, markerETag)
	}
	var objs []camunda.Object
	var model []string
	for _, id := range ids {
		o := getObject(ctx, t, client, bucket, camunda.Key(id))
		objs = append(objs, camunda.LeaseObject(o.body, o.meta))
		s, err := camunda.ReadLease(o.body, o.meta)
		if err != nil {
			t.Errorf("%s: Camunda cannot read it: %v\nbody %q\nmetadata %v", camunda.Key(id), err, o.body, o.meta)
			model = append(model, "ERROR")
			continue
		}
		model = append(model, s.String())
		t.Logf("%s as Camunda reads it: %s", camunda.Key(id), s)
		if err := check(id, s); err != nil {
			t.Errorf("%s: Camunda reads %s: %v", camunda.Key(id), s, err)
		}
	}
	for i, line := range camunda.JacksonCheck(t, objs...) {
		if line != model[i] && (model[i] != "ERROR" || !strings.HasPrefix(line, "ERROR")) {
			t.Errorf("%s: Jackson reads\n  %s\nour model of Camunda\n  %s", camunda.Key(ids[i]), line, model[i])
		}
	}
}

// camundaLayer writes a data root as Camunda 8.9 leaves it.
type camundaLayer struct {
	t    *testing.T
	root string
}

var markerTime = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func (l camundaLayer) version(node int, v int64, from *int64, files map[string]string) {
	l.t.Helper()
	dir := fmt.Sprintf("node-%d/v%d", node, v)
	l.files(dir, files)
	src := "null"
	if from != nil {
		src = strconv.FormatInt(*from, 10)
	}
	at := markerTime.Add(time.Duration(node*10+int(v)) * time.Hour).UnixMilli()
	l.files(dir, map[string]string{"directory-initialized.json": fmt.Sprintf(`{"initializedAt":%d,"version":%d,"initializedFrom":%s}`, at, v, src)})
}

func (l camundaLayer) files(dir string, files map[string]string) {
	l.t.Helper()
	for rel, content := range files {
		p := filepath.Join(l.root, dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			l.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o640); err != nil {
			l.t.Fatal(err)
		}
	}
}

func (l camundaLayer) link(from, to string) {
	l.t.Helper()
	p := filepath.Join(l.root, to)
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		l.t.Fatal(err)
	}
	if err := os.Link(filepath.Join(l.root, from), p); err != nil {
		l.t.Fatal(err)
	}
}

func (l camundaLayer) mkdir(dir string) {
	l.t.Helper()
	if err := os.MkdirAll(filepath.Join(l.root, dir), 0o750); err != nil {
		l.t.Fatal(err)
	}
}

// tree is a manifest of a data root: every entry's slash path relative to
// the root, mapped to "dir" or the SHA-256 of a regular file's content
// (anything else fails the test), and the files' inodes.
type tree struct {
	entries map[string]string
	inodes  map[string]uint64
}

func scanTree(t *testing.T, root string) tree {
	t.Helper()
	tr := tree{entries: map[string]string{}, inodes: map[string]uint64{}}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			tr.entries[rel] = "dir"
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			tr.entries[rel] = hex.EncodeToString(sum[:])
			fi, err := d.Info()
			if err != nil {
				return err
			}
			tr.inodes[rel] = fi.Sys().(*syscall.Stat_t).Ino
		default:
			return fmt.Errorf("%s: unexpected %v", rel, d.Type())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// under lists the entries below dir (not dir itself), sorted.
func (tr tree) under(dir string) []string {
	var out []string
	for p := range tr.entries {
		if strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

func diffTrees(a, b tree) string {
	var d strings.Builder
	for _, p := range slices.Sorted(maps.Keys(a.entries)) {
		if bv, ok := b.entries[p]; !ok {
			fmt.Fprintf(&d, "  - %s\n", p)
		} else if bv != a.entries[p] {
			fmt.Fprintf(&d, "  ~ %s\n", p)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(b.entries)) {
		if _, ok := a.entries[p]; !ok {
			fmt.Fprintf(&d, "  + %s\n", p)
		}
	}
	return d.String()
}

// checkCamundaRetention: of Camunda's directories, exactly the ones the
// retention rule removes are gone, but for the node whose preparation
// claimed the root (it runs no GC), and every file of the others is still
// there with the same content.
func checkCamundaRetention(t *testing.T, camundaTree, now tree, claimer int) {
	t.Helper()
	var removed, kept []string
	for _, d := range []string{"node-0/v1", "node-1/v1", "node-1/v2", "node-1/v3"} {
		if strings.HasPrefix(d, fmt.Sprintf("node-%d/", claimer)) {
			kept = append(kept, d)
		} else {
			removed = append(removed, d)
		}
	}
	gone := func(p string) bool {
		for _, r := range removed {
			if p == r || strings.HasPrefix(p, r+"/") {
				return true
			}
		}
		return false
	}
	for _, r := range removed {
		if _, ok := now.entries[r]; ok {
			t.Errorf("%s is still there; retention (keep 2, the current version counting) removes it", r)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(camundaTree.entries)) {
		got, ok := now.entries[p]
		switch {
		case gone(p):
		case !ok:
			// Name only the topmost entry that is missing.
			if _, parentThere := now.entries[path.Dir(p)]; parentThere || !strings.Contains(p, "/") {
				t.Errorf("Camunda's %s was removed", p)
			}
		case got != camundaTree.entries[p]:
			t.Errorf("Camunda's %s was changed", p)
		}
	}
	// And the root holds nothing else than this and what we add.
	want := map[string]bool{"nodeid-cluster.json": true, "node-0": true, "node-1": true, "node-2": true}
	for _, e := range append(kept, "node-0/v2", "node-0/v3", "node-1/v0", "node-1/v4", "node-1/v5", "node-2/v1") {
		want[e] = true
	}
	for p := range now.entries {
		if strings.Count(p, "/") <= 1 && !want[p] {
			t.Errorf("unexpected %s in the data root", p)
		}
	}
	for p := range want {
		if _, ok := now.entries[p]; !ok {
			t.Errorf("%s missing from the data root", p)
		}
	}
}

// zeebeSkipped reports whether the zeebe preset leaves rel out: any
// segment named runtime.
func zeebeSkipped(rel string) bool { return slices.Contains(strings.Split(rel, "/"), "runtime") }

// checkCarriedOver: dst holds exactly src's entries but runtime segments
// and the marker, with the same content; after an ungraceful takeover no
// file outside snapshot directories (at any depth) shares its inode with
// Camunda's, nor does a snapshot file that has another name (in runtime/).
func checkCarriedOver(t *testing.T, now, camundaTree tree, src, dst string) {
	t.Helper()
	const marker = "directory-initialized.json"
	want := map[string]string{}
	for _, p := range camundaTree.under(src) {
		rel := strings.TrimPrefix(p, src+"/")
		if rel != marker && !zeebeSkipped(rel) {
			want[rel] = camundaTree.entries[p]
		}
	}
	got := map[string]string{}
	for _, p := range now.under(dst) {
		if rel := strings.TrimPrefix(p, dst+"/"); rel != marker {
			got[rel] = now.entries[p]
		}
	}
	for _, rel := range slices.Sorted(maps.Keys(want)) {
		switch g, ok := got[rel]; {
		case !ok:
			t.Errorf("%s/%s not carried over to %s", src, rel, dst)
		case g != want[rel]:
			t.Errorf("%s/%s differs from Camunda's %s/%s", dst, rel, src, rel)
		}
	}
	for _, rel := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[rel]; !ok {
			t.Errorf("%s/%s is not in Camunda's %s", dst, rel, src)
		}
	}
	if len(want) < 8 {
		t.Fatalf("test data: only %d entries to carry from %s", len(want), src)
	}
	// inode -> Camunda's names, of the files still there (the inode of a
	// removed one may be reused by a copy).
	shared := map[uint64][]string{}
	for p, ino := range camundaTree.inodes {
		if now.inodes[p] == ino {
			shared[ino] = append(shared[ino], p)
		}
	}
	for rel, h := range got {
		if h == "dir" {
			continue
		}
		names := shared[now.inodes[dst+"/"+rel]]
		if len(names) == 0 {
			continue
		}
		segs := strings.Split(rel, "/")
		snapshot := slices.Contains(segs, "snapshots") || slices.Contains(segs, "bootstrap-snapshots")
		if !snapshot || slices.ContainsFunc(names, zeebeSkipped) {
			t.Errorf("%s/%s is a hard link of Camunda's %v after an ungraceful takeover", dst, rel, names)
		}
	}
}

var versionDirRE = regexp.MustCompile(`^node-([0-9]+)/v(0|[1-9][0-9]*)/directory-initialized\.json$`)

// checkMarkers reads every marker in the root as Camunda does, with our
// model and with Jackson; ours (the keys of fromOf) must also say where
// they were copied from and be written during the test.
func checkMarkers(t *testing.T, root string, now tree, since time.Time, fromOf map[string]*int64) {
	t.Helper()
	var paths []string
	for p := range now.entries {
		if strings.HasSuffix(p, "/directory-initialized.json") {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	var objs []camunda.Object
	var model []string
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, camunda.MarkerObject(b))
		d, err := camunda.ReadDirectoryMarker(b)
		if err != nil {
			t.Errorf("%s: Camunda cannot read %q: %v", p, b, err)
			model = append(model, "ERROR")
			continue
		}
		model = append(model, d.String())
		m := versionDirRE.FindStringSubmatch(p)
		if m == nil {
			t.Errorf("%s: a marker outside the top of a version directory", p)
			continue
		}
		v, _ := strconv.ParseInt(m[2], 10, 64)
		if d.Null || d.Version != v {
			t.Errorf("%s: Camunda reads %s, want version %d", p, d, v)
		}
		dir := strings.TrimSuffix(p, "/directory-initialized.json")
		if from, ours := fromOf[dir]; ours {
			if fmtVersion(d.InitializedFrom) != fmtVersion(from) {
				t.Errorf("%s: initializedFrom %s, want %s", p, fmtVersion(d.InitializedFrom), fmtVersion(from))
			}
			if d.InitializedAt < since.UnixMilli() || d.InitializedAt > time.Now().UnixMilli() {
				t.Errorf("%s: initializedAt %d is not during the test", p, d.InitializedAt)
			}
		}
	}
	for dir := range fromOf {
		if !slices.Contains(paths, dir+"/directory-initialized.json") {
			t.Errorf("%s has no marker", dir)
		}
	}
	for i, line := range camunda.JacksonCheck(t, objs...) {
		if line != model[i] && (model[i] != "ERROR" || !strings.HasPrefix(line, "ERROR")) {
			t.Errorf("%s: Jackson reads\n  %s\nour model of Camunda\n  %s", paths[i], line, model[i])
		}
	}
}
