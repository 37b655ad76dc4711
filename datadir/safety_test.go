package datadir

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/nodeid"
)

// These tests cover the ways a data root used to roll back or lose data: a
// version that went backwards, markers written by Camunda, directories GC
// could not judge, and two clusters sharing one root.

var (
	clusterA = Cluster{Bucket: "bucket-a", Prefix: "prod/"}
	clusterB = Cluster{Bucket: "bucket-b", Prefix: "prod/"}
)

// writePreparing writes the in-progress file that Prepare leaves in a
// directory it has not finished.
func writePreparing(t *testing.T, dir string, v nodeid.Version, c Cluster) {
	t.Helper()
	writePreparingTenure(t, dir, v, c, "")
}

// writePreparingTenure writes an in-progress file naming tenure; "" writes
// none, as releases before tenures did.
func writePreparingTenure(t *testing.T, dir string, v nodeid.Version, c Cluster, tenure string) {
	t.Helper()
	m := map[string]any{"version": v, "bucket": c.Bucket, "prefix": c.Prefix}
	if tenure != "" {
		m["tenure"] = tenure
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{PreparingName: string(b)})
}

// camundaMarker is a marker as Camunda 8.9 writes it: initializedAt in
// epoch milliseconds.
func camundaMarker(v nodeid.Version, from *nodeid.Version) string {
	f := "null"
	if from != nil {
		f = fmt.Sprint(*from)
	}
	return fmt.Sprintf(`{"initializedAt":1764547200123,"version":%d,"initializedFrom":%s}`, v, f)
}

func ver(v nodeid.Version) *nodeid.Version { return &v }

// snapshotTree returns every entry below root: directories as "dir",
// regular files with their content, symlinks as "-> target".
func snapshotTree(t *testing.T, root string) map[string]string {
	t.Helper()
	return readTree(t, root, func(string, fs.DirEntry) bool { return true })
}

// A valid version at or above the target means the lease's version went
// backwards. Preparing would start the node from older data (or empty) and
// GC would later remove the newer directory: refuse, and touch nothing.
func TestNewerValidVersionIsRefused(t *testing.T) {
	for _, camunda := range []bool{false, true} {
		t.Run(fmt.Sprintf("camunda=%v", camunda), func(t *testing.T) {
			root := t.TempDir()
			makeVersion(t, root, 0, 1, map[string]string{"data": "v1"}, 1)
			v5 := makeVersion(t, root, 0, 5, map[string]string{"data": "v5"}, 5)
			if camunda {
				writeFiles(t, v5, map[string]string{MarkerName: camundaMarker(5, ver(1))})
			}
			before := snapshotTree(t, root)
			for _, v := range []nodeid.Version{0, 2, 3, 4} {
				_, _, err := Prepare(context.Background(), root, inst(0, v), Options{Logger: quiet, Cluster: clusterA})
				if !errors.Is(err, ErrNewerVersion) {
					t.Fatalf("Prepare(v%d) with a valid v5: err = %v, want ErrNewerVersion", v, err)
				}
				if !strings.Contains(err.Error(), v5) {
					t.Errorf("error does not name %s: %v", v5, err)
				}
			}
			// Nothing created or removed, not even the ownership file.
			equalMaps(t, snapshotTree(t, root), before)
		})
	}
}

func TestCamundaMarkersAreValid(t *testing.T) {
	root := t.TempDir()
	v1 := makeVersion(t, root, 0, 1, map[string]string{"data": "v1"}, -1)
	writeFiles(t, v1, map[string]string{MarkerName: camundaMarker(1, nil)})
	v2 := makeVersion(t, root, 0, 2, map[string]string{"data": "v2", "snap/s": "s"}, -1)
	writeFiles(t, v2, map[string]string{MarkerName: camundaMarker(2, ver(1))})
	before := map[string]map[string]string{v1: snapshotTree(t, v1), v2: snapshotTree(t, v2)}

	dir, res := mustPrepare(t, root, inst(0, 3), Options{Keep: 3})
	if !res.HasSource || res.Source != 2 {
		t.Fatalf("source = %v/%d, want v2", res.HasSource, res.Source)
	}
	equalMaps(t, contents(t, dir), map[string]string{"data": "v2", "snap/s": "s"})
	// Keep 3 (v3 counts): both stay, untouched, markers included.
	if len(res.Removed) != 0 {
		t.Errorf("removed %v", res.Removed)
	}
	for d, want := range before {
		equalMaps(t, snapshotTree(t, d), want)
	}
}

func TestMarkerFormats(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "v3"), 0o750); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(filepath.Join(root, "v3"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, tc := range []struct {
		marker string
		want   time.Time // zero: invalid
	}{
		// Written by this project before (and still).
		{`{"initializedAt":"2025-01-01T00:00:00Z","version":3,"initializedFrom":2}`, time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)},
		{`{"initializedAt":"2026-11-30T10:20:30.123456789Z","version":3,"initializedFrom":null}`, time.Date(2026, 11, 30, 10, 20, 30, 123456789, time.UTC)},
		// Camunda 8.9.
		{`{"initializedAt":1764547200123,"version":3,"initializedFrom":null}`, time.UnixMilli(1764547200123)},
		{`{"initializedAt":0,"version":3,"initializedFrom":2}`, time.UnixMilli(0)},
		{`{"initializedAt":"yesterday","version":3}`, time.Time{}},
		{`{"initializedAt":1.5,"version":3}`, time.Time{}},
		{`{"initializedAt":true,"version":3}`, time.Time{}},
		{`{"initializedAt":null,"version":3}`, time.Time{}},
		{`{"version":3}`, time.Time{}},
		{`{"initializedAt":1764547200123}`, time.Time{}},
	} {
		writeFiles(t, root, map[string]string{"v3/" + MarkerName: tc.marker})
		m, err := readMarker(d, 3)
		switch {
		case tc.want.IsZero() && err == nil:
			t.Errorf("%s accepted: %+v", tc.marker, m)
		case !tc.want.IsZero() && err != nil:
			t.Errorf("%s: %v", tc.marker, err)
		case !tc.want.IsZero() && !m.InitializedAt.Equal(tc.want):
			t.Errorf("%s: initializedAt %v, want %v", tc.marker, m.InitializedAt, tc.want)
		}
	}
}

// notOurs creates, in node-0 of root, version directories that GC cannot
// positively identify as its own leftovers, and returns their names.
func notOurs(t *testing.T, root string) []string {
	t.Helper()
	v1 := makeVersion(t, root, 0, 1, map[string]string{"data": "garbage marker"}, -1)
	writeFiles(t, v1, map[string]string{MarkerName: "not json"})
	makeVersion(t, root, 0, 2, map[string]string{"data": "no marker, no in-progress file"}, -1)
	v3 := makeVersion(t, root, 0, 3, map[string]string{"data": "a newer format"}, -1)
	writeFiles(t, v3, map[string]string{MarkerName: `{"createdAt":"2027-01-01T00:00:00Z","generation":3}`})
	v4 := makeVersion(t, root, 0, 4, map[string]string{"data": "another cluster's leftover"}, -1)
	writePreparing(t, v4, 4, clusterB)
	v5 := makeVersion(t, root, 0, 5, map[string]string{"data": "in-progress file of another version"}, -1)
	writePreparing(t, v5, 6, clusterA)
	writeFiles(t, filepath.Join(root, "node-0"), map[string]string{"v6": "a file named like a version"})
	return []string{"v1", "v2", "v3", "v4", "v5", "v6"}
}

func TestGCLeavesWhatIsNotOurs(t *testing.T) {
	for _, via := range []string{"Prepare", "Collect"} {
		t.Run(via, func(t *testing.T) {
			root := t.TempDir()
			names := notOurs(t, root)
			before := map[string]map[string]string{}
			for _, n := range names {
				before[n] = snapshotTree(t, filepath.Join(root, "node-0", n))
			}
			makeVersion(t, root, 0, 7, map[string]string{"data": "v7"}, 7)
			makeVersion(t, root, 0, 8, map[string]string{"data": "v8"}, 8)
			claimRoot(t, root, clusterA) // an adopting Prepare collects nothing
			rec := &recorder{}
			opts := Options{Keep: 2, Cluster: clusterA, Logger: slog.New(rec)}
			var removed []string
			if via == "Prepare" {
				_, res := mustPrepare(t, root, inst(0, 9), opts)
				removed = res.Removed
			} else {
				makeVersion(t, root, 0, 9, nil, 9)
				var err error
				if removed, err = Collect(context.Background(), root, inst(0, 9), opts); err != nil {
					t.Fatal(err)
				}
			}
			// Keep 2: v9 and v8 stay, v7 (valid, ours to delete) goes.
			if want := []string{filepath.Join(root, "node-0", "v7")}; !slices.Equal(removed, want) {
				t.Errorf("removed %v, want %v", removed, want)
			}
			for _, n := range names {
				equalMaps(t, snapshotTree(t, filepath.Join(root, "node-0", n)), before[n])
			}
			// One line per GC run names them all.
			var lines []string
			for _, r := range rec.recs {
				if r.Message == "not ours, left in place" {
					r.Attrs(func(a slog.Attr) bool {
						if a.Key == "dirs" {
							lines = append(lines, a.Value.String())
						}
						return true
					})
				}
			}
			if len(lines) != 1 {
				t.Fatalf("%d 'not ours' records, want 1", len(lines))
			}
			for _, n := range names {
				if !strings.Contains(lines[0], filepath.Join(root, "node-0", n)) {
					t.Errorf("%s not in the log: %s", n, lines[0])
				}
			}
		})
	}
}

// Our own leftovers, and empty directories, are removed.
func TestOwnLeftoversAreRemoved(t *testing.T) {
	root := t.TempDir()
	makeVersion(t, root, 0, 1, map[string]string{"data": "v1"}, 1)
	v2 := makeVersion(t, root, 0, 2, map[string]string{"data": "partial", "sub/x": "y"}, -1)
	writePreparing(t, v2, 2, clusterA)
	v3 := makeVersion(t, root, 0, 3, map[string]string{"data": "partial"}, -1)
	writePreparing(t, v3, 3, clusterA)
	writeFiles(t, v3, map[string]string{MarkerName: `{"initializedAt":"2025-01-`}) // crashed writing the marker
	makeVersion(t, root, 0, 4, nil, -1)                                            // empty: crashed right after mkdir
	makeVersion(t, root, 0, 5, map[string]string{"data": "v5"}, 5)
	claimRoot(t, root, clusterA)
	_, res := mustPrepare(t, root, inst(0, 6), Options{Keep: 10, Cluster: clusterA})
	var want []string
	for _, n := range []string{"v4", "v3", "v2"} {
		want = append(want, filepath.Join(root, "node-0", n))
	}
	if !slices.Equal(res.Removed, want) {
		t.Errorf("removed %v, want %v", res.Removed, want)
	}
	if got := versionsOf(t, root, 0); !slices.Equal(got, []string{"v1", "v5", "v6"}) {
		t.Errorf("left %v", got)
	}
}

// Prepare announces an unfinished directory with the in-progress file and
// removes it once the marker is written.
func TestPreparingFileMarksUnfinishedWork(t *testing.T) {
	root := t.TempDir()
	makeVersion(t, root, 0, 1, map[string]string{"a": "alpha"}, 1)
	var during map[string]any
	setHook(t, &testHookBeforeValidate, func(dst string) {
		b, err := os.ReadFile(filepath.Join(dst, PreparingName))
		if err != nil {
			t.Errorf("during the copy: %v", err)
			return
		}
		if err := json.Unmarshal(b, &during); err != nil {
			t.Errorf("%s: %v", b, err)
		}
	})
	dir, _ := mustPrepare(t, root, inst(0, 2), Options{Cluster: clusterA, Tenure: "task-1"})
	want := map[string]any{"version": float64(2), "bucket": "bucket-a", "prefix": "prod/", "tenure": "task-1"}
	if fmt.Sprint(during) != fmt.Sprint(want) {
		t.Errorf("in-progress file = %v, want %v", during, want)
	}
	if exists(t, filepath.Join(dir, PreparingName)) {
		t.Error("in-progress file left after the marker")
	}
	// A stale in-progress file in a source (crash after its marker) is not
	// carried over.
	writePreparing(t, dir, 2, clusterA)
	dir3, _ := mustPrepare(t, root, inst(0, 3), Options{Cluster: clusterA})
	if exists(t, filepath.Join(dir3, PreparingName)) {
		t.Error("in-progress file carried over or left")
	}
}

// The target exists without a valid marker and is not our leftover: it may
// be someone's data. Prepare refuses instead of removing it.
func TestTargetNotOursIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(t *testing.T, root, target string)
	}{
		{"no marker, no in-progress file", func(t *testing.T, root, target string) {
			writeFiles(t, target, map[string]string{"data": "x"})
		}},
		{"garbage marker", func(t *testing.T, root, target string) {
			writeFiles(t, target, map[string]string{"data": "x", MarkerName: "garbage"})
		}},
		{"another cluster's leftover", func(t *testing.T, root, target string) {
			writeFiles(t, target, map[string]string{"data": "x"})
			writePreparing(t, target, 2, clusterB)
		}},
		{"in-progress file of another version", func(t *testing.T, root, target string) {
			writeFiles(t, target, map[string]string{"data": "x"})
			writePreparing(t, target, 1, clusterA)
		}},
		{"garbage in-progress file", func(t *testing.T, root, target string) {
			writeFiles(t, target, map[string]string{"data": "x", PreparingName: "{"})
		}},
		{"a file", func(t *testing.T, root, target string) {
			writeFiles(t, filepath.Dir(target), map[string]string{"v2": "x"})
		}},
		{"a symlink", func(t *testing.T, root, target string) {
			if err := os.Symlink("v1", target); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			makeVersion(t, root, 0, 1, map[string]string{"a": "alpha"}, 1)
			target := Dir(root, inst(0, 2))
			tc.make(t, root, target)
			before := snapshotTree(t, root)
			_, _, err := Prepare(context.Background(), root, inst(0, 2), Options{Logger: quiet, Cluster: clusterA})
			if !errors.Is(err, ErrUnrecognized) {
				t.Fatalf("err = %v, want ErrUnrecognized", err)
			}
			equalMaps(t, snapshotTree(t, root), before)
		})
	}
}

// An empty target is the leftover of a crash right after mkdir: redone.
func TestEmptyTargetIsRedone(t *testing.T) {
	root := t.TempDir()
	makeVersion(t, root, 0, 1, map[string]string{"a": "alpha"}, 1)
	makeVersion(t, root, 0, 2, nil, -1)
	dir, res := mustPrepare(t, root, inst(0, 2), Options{Cluster: clusterA})
	if !res.Redone || res.Source != 1 {
		t.Errorf("result = %+v", res)
	}
	equalMaps(t, contents(t, dir), map[string]string{"a": "alpha"})
}

// A marker that exists but cannot be read may be a valid version in a
// format this code does not know. Above the source Prepare would use, it
// may hold newer data: Prepare stops instead of silently starting older.
func TestUnreadableMarkerAboveTheSourceIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    nodeid.Version
	}{
		{"between the source and the target", 2},
		{"above the target", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			makeVersion(t, root, 0, 1, map[string]string{"a": "alpha"}, 1)
			d := makeVersion(t, root, 0, tc.v, map[string]string{"a": "newer?"}, -1)
			writeFiles(t, d, map[string]string{MarkerName: `{"initializedAt":"2027-01-01","version":"two"}`})
			before := snapshotTree(t, root)
			_, _, err := Prepare(context.Background(), root, inst(0, 3), Options{Logger: quiet, Cluster: clusterA})
			if !errors.Is(err, ErrUnrecognized) || !strings.Contains(err.Error(), d) {
				t.Fatalf("err = %v, want ErrUnrecognized naming %s", err, d)
			}
			equalMaps(t, snapshotTree(t, root), before)
		})
	}
}

func TestForeignClusterIsRefused(t *testing.T) {
	root := t.TempDir()
	mustPrepare(t, root, inst(0, 1), Options{Cluster: clusterA})
	b, err := os.ReadFile(filepath.Join(root, OwnerName))
	if err != nil {
		t.Fatal(err)
	}
	var owner map[string]any
	if err := json.Unmarshal(b, &owner); err != nil || fmt.Sprint(owner) != fmt.Sprint(map[string]any{"bucket": "bucket-a", "prefix": "prod/"}) {
		t.Fatalf("%s = %s (%v)", OwnerName, b, err)
	}
	before := snapshotTree(t, root)
	for _, other := range []Cluster{clusterB, {Bucket: "bucket-a", Prefix: "test/"}, {Bucket: "bucket-a"}} {
		for _, in := range []nodeid.NodeInstance{inst(0, 2), inst(1, 1)} {
			_, _, err := Prepare(context.Background(), root, in, Options{Logger: quiet, Cluster: other})
			if !errors.Is(err, ErrForeignCluster) {
				t.Fatalf("%+v, Prepare(%v): err = %v, want ErrForeignCluster", other, in, err)
			}
			if !strings.Contains(err.Error(), "s3://bucket-a/prod/") {
				t.Errorf("error does not name the owner: %v", err)
			}
		}
		if _, err := Collect(context.Background(), root, inst(0, 9), Options{Logger: quiet, Cluster: other, Keep: 1}); !errors.Is(err, ErrForeignCluster) {
			t.Errorf("%+v, Collect: err = %v, want ErrForeignCluster", other, err)
		}
	}
	equalMaps(t, snapshotTree(t, root), before)

	mustPrepare(t, root, inst(0, 2), Options{Cluster: clusterA})
	// Without a cluster the check is skipped.
	mustPrepare(t, root, inst(1, 1), Options{})

	// An ownership file that cannot be read names no owner: refused too.
	writeFiles(t, root, map[string]string{OwnerName: "{"})
	if _, _, err := Prepare(context.Background(), root, inst(0, 3), Options{Logger: quiet, Cluster: clusterA}); !errors.Is(err, ErrForeignCluster) {
		t.Errorf("unreadable %s: err = %v, want ErrForeignCluster", OwnerName, err)
	}
	if err := os.Remove(filepath.Join(root, OwnerName)); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, OwnerName), 0o750); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Prepare(context.Background(), root, inst(0, 3), Options{Logger: quiet, Cluster: clusterA}); !errors.Is(err, ErrForeignCluster) {
		t.Errorf("%s a directory: err = %v, want ErrForeignCluster", OwnerName, err)
	}
}

// claimRoot writes the ownership file, as the first Prepare for c does.
func claimRoot(t *testing.T, root string, c Cluster) {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, OwnerName), b, 0o640); err != nil {
		t.Fatal(err)
	}
}

// A root written before ownership was recorded (or by Camunda) is adopted.
func TestUnownedRootIsAdopted(t *testing.T) {
	root := t.TempDir()
	v1 := makeVersion(t, root, 0, 1, map[string]string{"a": "alpha"}, -1)
	writeFiles(t, v1, map[string]string{MarkerName: camundaMarker(1, nil)})
	// Collect only deletes; it never claims.
	if _, err := Collect(context.Background(), root, inst(0, 1), Options{Logger: quiet, Cluster: clusterA}); err != nil {
		t.Fatal(err)
	}
	if exists(t, filepath.Join(root, OwnerName)) {
		t.Fatalf("Collect wrote %s", OwnerName)
	}
	_, res := mustPrepare(t, root, inst(0, 2), Options{Cluster: clusterA})
	if !res.HasSource || res.Source != 1 {
		t.Errorf("result = %+v", res)
	}
	if !exists(t, filepath.Join(root, OwnerName)) {
		t.Fatalf("%s not written", OwnerName)
	}
	if _, _, err := Prepare(context.Background(), root, inst(0, 3), Options{Logger: quiet, Cluster: clusterB}); !errors.Is(err, ErrForeignCluster) {
		t.Errorf("after adoption: err = %v, want ErrForeignCluster", err)
	}
}

// A root without the ownership file may be in use by another cluster (one
// of a release before the file existed, or a Camunda root): a cluster
// pointed at it by mistake adopts it, but its adopting Prepare deletes
// nothing, so that cluster's next start refuses the root (ErrForeignCluster)
// before anything of it is lost (found by review).
func TestAdoptingPrepareDeletesNothing(t *testing.T) {
	root := t.TempDir()
	for v := nodeid.Version(5); v <= 7; v++ {
		// RFC 3339 markers: an earlier release, in use by cluster B.
		makeVersion(t, root, 0, v, map[string]string{"log/segment": "cluster B's data at v" + itoa(v)}, v)
	}
	node := filepath.Join(root, "node-0")
	before := snapshotTree(t, node)
	rec := &recorder{}
	dir, res, err := Prepare(context.Background(), root, inst(0, 9), Options{Cluster: clusterA, Keep: 1, Logger: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Removed) != 0 || !rec.has("garbage collection skipped until the next preparation: this one claimed the data root") {
		t.Errorf("the adopting Prepare removed %v; want nothing, and a log line saying so", res.Removed)
	}
	after := snapshotTree(t, node)
	for k := range after {
		if strings.HasPrefix(k, "v9/") || k == "v9" {
			delete(after, k)
		}
	}
	equalMaps(t, after, before)
	_, _, errB := Prepare(context.Background(), root, inst(0, 8), Options{Cluster: clusterB, Logger: quiet})
	if !errors.Is(errB, ErrForeignCluster) {
		t.Errorf("cluster B afterwards: err = %v, want ErrForeignCluster", errB)
	}
	equalMaps(t, contents(t, dir), map[string]string{"log/segment": "cluster B's data at v7"})
}
