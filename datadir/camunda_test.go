package datadir

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/nodeid"
)

// camundaMarkerWire is DirectoryInitializationInfo as Camunda 8.9 reads it
// with a default Jackson ObjectMapper: these three fields and no others,
// initializedAt a long.
type camundaMarkerWire struct {
	InitializedAt   int64  `json:"initializedAt"`
	Version         int64  `json:"version"`
	InitializedFrom *int64 `json:"initializedFrom"`
}

// camundaForm checks that the marker in dir is exactly in Camunda's form and
// returns it.
func camundaForm(t *testing.T, dir string) camundaMarkerWire {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, MarkerName))
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatalf("marker %s: %v", b, err)
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range fields {
			if !yield(k) {
				return
			}
		}
	})
	if !slices.Equal(names, []string{"initializedAt", "initializedFrom", "version"}) {
		t.Errorf("marker %s has fields %v, want exactly initializedAt, initializedFrom, version", b, names)
	}
	if !regexp.MustCompile(`^[0-9]+$`).Match(fields["initializedAt"]) {
		t.Errorf("marker %s: initializedAt %s is not integer epoch milliseconds", b, fields["initializedAt"])
	}
	if f := fields["initializedFrom"]; !bytes.Equal(f, []byte("null")) && !regexp.MustCompile(`^[0-9]+$`).Match(f) {
		t.Errorf("marker %s: initializedFrom %s is neither a version nor null", b, f)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m camundaMarkerWire
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("marker %s does not decode strictly: %v", b, err)
	}
	if dec.More() {
		t.Errorf("marker %s has trailing data", b)
	}
	return m
}

// Markers are written exactly as Camunda 8.9 writes them, so that Camunda
// running on the root again finds our directories valid.
func TestMarkersAreWrittenInCamundaForm(t *testing.T) {
	root := t.TempDir()
	before := time.Now().UnixMilli()
	v1, _ := mustPrepare(t, root, inst(0, 1), Options{})
	v2, _ := mustPrepare(t, root, inst(0, 2), Options{})
	after := time.Now().UnixMilli()
	for dir, want := range map[string]struct {
		v    int64
		from *int64
	}{v1: {1, nil}, v2: {2, new(int64(1))}} {
		m := camundaForm(t, dir)
		if m.Version != want.v || (m.InitializedFrom == nil) != (want.from == nil) ||
			m.InitializedFrom != nil && *m.InitializedFrom != *want.from {
			t.Errorf("%s: marker %+v, want version %d from %v", dir, m, want.v, want.from)
		}
		if m.InitializedAt < before || m.InitializedAt > after {
			t.Errorf("%s: initializedAt %d not within [%d, %d]", dir, m.InitializedAt, before, after)
		}
	}
	if _, err := json.Marshal(Marker{InitializedAt: time.UnixMilli(-1), Version: 1}); err == nil {
		t.Error("a marker before 1970 was written; Camunda would find it invalid")
	}
}

// Markers of earlier releases (initializedAt an RFC 3339 string) are still
// valid: a source, and kept by GC.
func TestOldFormMarkersStillRead(t *testing.T) {
	root := t.TempDir()
	old := func(v nodeid.Version, from string) string {
		return `{"initializedAt":"2026-01-02T03:04:05.123456789Z","version":` + itoa(v) + `,"initializedFrom":` + from + `}`
	}
	v1 := makeVersion(t, root, 0, 1, map[string]string{"a": "one"}, -1)
	writeFiles(t, v1, map[string]string{MarkerName: old(1, "null")})
	v2 := makeVersion(t, root, 0, 2, map[string]string{"a": "two"}, -1)
	writeFiles(t, v2, map[string]string{MarkerName: old(2, "1")})
	dir, res := mustPrepare(t, root, inst(0, 3), Options{})
	if !res.HasSource || res.Source != 2 {
		t.Fatalf("source = %v/%d, want v2 (old-form marker)", res.HasSource, res.Source)
	}
	equalMaps(t, contents(t, dir), map[string]string{"a": "two"})
	// Keep 2: v3 and v2 stay, v1 (valid, old form) is collected.
	if len(res.Removed) != 1 || res.Removed[0] != v1 {
		t.Errorf("removed %v, want [%s]", res.Removed, v1)
	}
	if b, err := os.ReadFile(filepath.Join(v2, MarkerName)); err != nil || string(b) != old(2, "1") {
		t.Errorf("v2's marker = %q, %v; want it untouched", b, err)
	}
}

func itoa(v nodeid.Version) string { return strconv.FormatInt(int64(v), 10) }

// sameInode reports whether rel is the same file in both directories.
func sameInode(t *testing.T, a, b, rel string) bool {
	t.Helper()
	ai, err := os.Lstat(filepath.Join(a, rel))
	if err != nil {
		t.Fatal(err)
	}
	bi, err := os.Lstat(filepath.Join(b, rel))
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(ai, bi)
}

func zeebe(t *testing.T) CopyRules {
	t.Helper()
	r, err := Preset(PresetZeebe)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A Zeebe data directory, with what each preset must do with each file.
var zeebeFiles = map[string]string{
	"snapshots/1-1-5-4/000042.sst":                             "snapshot sst",
	"snapshots/1-1-5-4/CHECKSUM":                               "snapshot checksum",
	"bootstrap-snapshots/1/000007.sst":                         "bootstrap sst",
	"raft-partition/partitions/1/log-1.log":                    "journal",
	"raft-partition/partitions/1/.conf":                        "raft conf",
	"raft-partition/partitions/1/snapshots/1-1-5-4/000043.sst": "nested snapshot",
	"snapshots.bak/x":                                          "not named snapshots",
	"runtime/000050.sst":                                       "runtime state",
	"runtime/CURRENT":                                          "MANIFEST",
	"raft-partition/partitions/1/runtime/db":                   "nested runtime",
	"partitions/2/runtime":                                     "a file named runtime",
	"runtimes/x":                                               "not named runtime",
}

func TestZeebePreset(t *testing.T) {
	var carried, linkedAfterCrash []string
	for rel := range zeebeFiles {
		if !(CopyRules{SkipSegment: []string{"runtime"}}).skips(rel) {
			carried = append(carried, rel)
		}
	}
	// Camunda's copier links a file if any segment of its path is a
	// snapshot directory's name, at any depth.
	linkedAfterCrash = []string{"snapshots/1-1-5-4/000042.sst", "snapshots/1-1-5-4/CHECKSUM", "bootstrap-snapshots/1/000007.sst",
		"raft-partition/partitions/1/snapshots/1-1-5-4/000043.sst"}
	want := map[string]string{}
	for _, rel := range carried {
		want[rel] = zeebeFiles[rel]
	}
	if len(want) != 8 {
		t.Fatalf("test data: %d files carried over, want 8: %v", len(want), carried)
	}
	for _, tc := range []struct {
		name    string
		opts    Options
		want    map[string]string // content of the new version
		linked  []string          // the rest of want is copied
		skipped int64             // the marker, and runtime/, the nested runtime/ and the file runtime under zeebe
	}{
		{"zeebe after a crash", Options{Rules: zeebe(t)}, want, linkedAfterCrash, 4},
		{"zeebe after a graceful release", Options{Rules: zeebe(t), PreviousGraceful: true}, want, carried, 4},
		{"default after a crash copies everything", Options{}, zeebeFiles, nil, 1},
		{"default preset by name", Options{Rules: mustPreset(t, PresetDefault)}, zeebeFiles, nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			src := makeVersion(t, root, 0, 4, zeebeFiles, 4)
			dir, res := mustPrepare(t, root, inst(0, 5), tc.opts)
			equalMaps(t, contents(t, dir), tc.want)
			for rel := range tc.want {
				if want := slices.Contains(tc.linked, rel); sameInode(t, src, dir, rel) != want {
					t.Errorf("%s: hard-linked = %v, want %v", rel, !want, want)
				}
			}
			if res.FilesLinked != int64(len(tc.linked)) || res.FilesCopied != int64(len(tc.want)-len(tc.linked)) || res.Skipped != tc.skipped {
				t.Errorf("result = %+v", res)
			}
		})
	}
}

func mustPreset(t *testing.T, name string) CopyRules {
	t.Helper()
	r, err := Preset(name)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Zeebe's snapshots are RocksDB checkpoints: hard links of the runtime's
// files. Such a file has another name through which a stale holder may
// still write, so after a crash it is copied even under the zeebe preset:
// the per-inode safety rule wins over Camunda's per-path rule.
func TestZeebePresetKeepsTheNlinkRule(t *testing.T) {
	root := t.TempDir()
	src := makeVersion(t, root, 0, 4, map[string]string{"runtime/000042.sst": "shared", "snapshots/1/000043.sst": "alone"}, 4)
	if err := os.Link(filepath.Join(src, "runtime/000042.sst"), filepath.Join(src, "snapshots/1/000042.sst")); err != nil {
		t.Fatal(err)
	}
	dir, _ := mustPrepare(t, root, inst(0, 5), Options{Rules: zeebe(t)})
	equalMaps(t, contents(t, dir), map[string]string{"snapshots/1/000042.sst": "shared", "snapshots/1/000043.sst": "alone"})
	if sameInode(t, src, dir, "snapshots/1/000042.sst") {
		t.Error("a snapshot file with a second name (in runtime/) was hard-linked after a crash")
	}
	if !sameInode(t, src, dir, "snapshots/1/000043.sst") {
		t.Error("a snapshot file with one name was copied after a crash")
	}
}

func TestPresets(t *testing.T) {
	for _, name := range []string{"", PresetDefault} {
		if r, err := Preset(name); err != nil || r.SkipSegment != nil || r.LinkAfterCrashSegment != nil {
			t.Errorf("Preset(%q) = %+v, %v; want no rules", name, r, err)
		}
	}
	if _, err := Preset("Zeebe"); !errors.Is(err, ErrInvalid) {
		t.Errorf("Preset(Zeebe): err = %v, want ErrInvalid", err)
	}
	for _, r := range []CopyRules{
		{SkipSegment: []string{""}}, {SkipSegment: []string{"a/b"}}, {SkipSegment: []string{".."}},
		{LinkAfterCrashSegment: []string{""}}, {LinkAfterCrashSegment: []string{"/snapshots"}}, {LinkAfterCrashSegment: []string{"a/snapshots"}},
		{LinkAfterCrashSegment: []string{"snapshots/"}}, {LinkAfterCrashSegment: []string{"."}}, {LinkAfterCrashSegment: []string{".."}},
	} {
		if _, _, err := Prepare(context.Background(), t.TempDir(), inst(0, 1), Options{Rules: r, Logger: quiet}); !errors.Is(err, ErrInvalid) {
			t.Errorf("Rules %+v: err = %v, want ErrInvalid", r, err)
		}
	}
}

// camundaValid is Camunda 8.9's VersionedDirectoryLayout.isDirectoryInitialized:
// a regular marker file that a default Jackson ObjectMapper maps onto
// DirectoryInitializationInfo (unknown fields and a string initializedAt
// fail), initializedAt not negative, naming the directory's version.
func camundaValid(t *testing.T, dir string, v int64) bool {
	t.Helper()
	p := filepath.Join(dir, MarkerName)
	if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
		return false
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m camundaMarkerWire
	if dec.Decode(&m) != nil || dec.More() {
		return false
	}
	return m.InitializedAt >= 0 && m.Version == v && (m.InitializedFrom == nil || *m.InitializedFrom >= 0)
}

// camundaRoot builds a data root as Camunda 8.9 leaves it: node-N/vK with
// Camunda's markers, runtime/ and snapshots/, no file of ours, and invalid
// directories of its own: a half-copied v3 (a crash during Camunda's copy,
// above the newest valid v2) and a markerless v0.
func camundaRoot(t *testing.T) (root string, files map[int64]map[string]string) {
	t.Helper()
	root = t.TempDir()
	files = map[int64]map[string]string{
		1: {
			"snapshots/1-1-3-2/000009.sst":          "v1 snapshot",
			"raft-partition/partitions/1/log-1.log": "v1 journal",
			"runtime/000010.sst":                    "v1 runtime",
		},
		2: {
			"snapshots/1-1-5-4/000042.sst":          "v2 snapshot",
			"snapshots/1-1-5-4/CHECKSUM":            "v2 checksum",
			"bootstrap-snapshots/1/000007.sst":      "v2 bootstrap",
			"raft-partition/partitions/1/log-1.log": "v2 journal",
			"raft-partition/partitions/1/.conf":     "v2 raft conf",
			"runtime/000050.sst":                    "v2 runtime",
			"runtime/CURRENT":                       "MANIFEST-000051",
			"partitions/1/runtime/x":                "v2 nested runtime",
			".topology.meta":                        "v2 topology",
		},
	}
	v1 := makeVersion(t, root, 0, 1, files[1], -1)
	writeFiles(t, v1, map[string]string{MarkerName: camundaMarker(1, nil)})
	v2 := makeVersion(t, root, 0, 2, files[2], -1)
	writeFiles(t, v2, map[string]string{MarkerName: camundaMarker(2, ver(1))})
	makeVersion(t, root, 0, 3, map[string]string{"snapshots/1-1-5-4/000042.sst": "v2 snapshot"}, -1)
	makeVersion(t, root, 0, 0, map[string]string{"runtime/LOCK": ""}, -1)
	n1 := makeVersion(t, root, 1, 7, map[string]string{"snapshots/s": "node 1"}, -1)
	writeFiles(t, n1, map[string]string{MarkerName: camundaMarker(7, ver(6))})
	return root, files
}

// Prepare takes over a data root that Camunda 8.9 wrote: it copies the
// newest valid Camunda version, removes nothing of Camunda's but valid
// versions past Keep, leaves Camunda's invalid directories alone, and
// leaves only directories that Camunda finds valid.
func TestCamundaRootIsTakenOver(t *testing.T) {
	for _, graceful := range []bool{false, true} {
		t.Run(fmt.Sprintf("graceful=%v", graceful), func(t *testing.T) {
			root, files := camundaRoot(t)
			node := filepath.Join(root, "node-0")
			v2 := filepath.Join(node, "v2")
			keep := map[string]map[string]string{}
			for _, d := range []string{v2, filepath.Join(node, "v3"), filepath.Join(node, "v0"), filepath.Join(root, "node-1")} {
				keep[d] = snapshotTree(t, d)
			}
			rec := &recorder{}
			dir, res := mustPrepare(t, root, inst(0, 4), Options{
				Cluster: clusterA, Rules: zeebe(t), PreviousGraceful: graceful, Logger: slog.New(rec),
			})
			if !res.HasSource || res.Source != 2 {
				t.Fatalf("source = %v/%d, want v2", res.HasSource, res.Source)
			}
			// Every file of v2 but the runtime segments, nothing else.
			want := map[string]string{}
			for rel, c := range files[2] {
				if !strings.HasPrefix(rel, "runtime/") && !strings.Contains(rel, "/runtime/") {
					want[rel] = c
				}
			}
			equalMaps(t, contents(t, dir), want)
			// v3, the graceful predecessor's version, is Camunda's crash
			// leftover: v2's holder may still write, so v2 is taken as
			// after an ungraceful takeover either way.
			if res.PredecessorIncomplete != graceful {
				t.Errorf("PredecessorIncomplete = %v, want %v", res.PredecessorIncomplete, graceful)
			}
			for rel := range want {
				seg := "/" + rel
				linked := strings.Contains(seg, "/snapshots/") || strings.Contains(seg, "/bootstrap-snapshots/")
				if sameInode(t, v2, dir, rel) != linked {
					t.Errorf("%s: hard-linked = %v, want %v", rel, !linked, linked)
				}
			}
			// The adopting Prepare deletes nothing: the root may still be
			// in use by another cluster, whose next start refuses it.
			if len(res.Removed) != 0 || !rec.has("garbage collection skipped until the next preparation: this one claimed the data root") {
				t.Errorf("adopting Prepare removed %v, want nothing, and a log line saying so", res.Removed)
			}
			// The next GC keeps 2 of the valid versions (v4, v2): v1 goes;
			// Camunda's invalid v3 and v0 and node-1 stay exactly as they were.
			removed, err := Collect(context.Background(), root, inst(0, 4), Options{Cluster: clusterA, Logger: slog.New(rec)})
			if err != nil || len(removed) != 1 || removed[0] != filepath.Join(node, "v1") {
				t.Errorf("removed %v, %v; want only v1", removed, err)
			}
			if got := versionsOf(t, root, 0); !slices.Equal(got, []string{"v0", "v2", "v3", "v4"}) {
				t.Errorf("node-0 holds %v", got)
			}
			for d, before := range keep {
				equalMaps(t, snapshotTree(t, d), before)
			}
			if !rec.has("not ours, left in place") {
				t.Error("the invalid directories left in place were not logged")
			}
			// Adopted: our ownership file, at the root where Camunda never looks.
			if c, ok, err := readOwnerFile(root); err != nil || !ok || c != clusterA {
				t.Errorf("ownership = %v %v %v, want %v", c, ok, err, clusterA)
			}
			if exists(t, filepath.Join(dir, PreparingName)) {
				t.Errorf("%s left in the prepared directory", PreparingName)
			}
			// Back to Camunda: every complete directory we leave is valid
			// for it, so its GC keeps them and its provider copies from v4.
			for v, d := range map[int64]string{2: v2, 4: dir} {
				if !camundaValid(t, d, v) {
					t.Errorf("%s is not valid for Camunda", d)
				}
			}
		})
	}
}

// A Camunda directory without a valid marker as the very target is not
// ours to remove: refused, and nothing is written, not even the ownership
// file.
func TestCamundaInvalidTargetIsRefused(t *testing.T) {
	root, _ := camundaRoot(t)
	before := snapshotTree(t, root)
	_, _, err := Prepare(context.Background(), root, inst(0, 3), Options{Cluster: clusterA, Rules: zeebe(t), Logger: quiet})
	if !errors.Is(err, ErrUnrecognized) {
		t.Fatalf("err = %v, want ErrUnrecognized", err)
	}
	equalMaps(t, snapshotTree(t, root), before)
}

func readOwnerFile(root string) (Cluster, bool, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return Cluster{}, false, err
	}
	defer r.Close()
	return readOwner(r, root)
}

// has reports whether a record with message msg was logged.
func (r *recorder) has(msg string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.recs, func(rec slog.Record) bool { return rec.Message == msg })
}

// Camunda creates its marker, then writes it: a crash in between leaves an
// empty (or truncated) marker in a directory that was never complete. Such a
// directory above the source is no reason to refuse, nor ours to remove;
// a complete marker in an unknown format still is a reason to refuse.
func TestCamundaCrashDuringMarkerWrite(t *testing.T) {
	for _, tc := range []struct {
		name, marker string
		refused      bool
	}{
		{"empty", "", false},
		{"whitespace", "\n", false},
		{"truncated", `{"initializedAt":17645472`, false},
		{"complete, trailing data", `{"initializedAt":1764547200123,"version":3,"initializedFrom":2}x`, true},
		{"complete, other version", camundaMarker(5, nil), true},
		// NULs where JSON can end, or after what no JSON starts with, are
		// no torn write (TestZeroFilledMarkerIsIncomplete).
		{"complete, trailing NULs", camundaMarker(3, ver(2)) + "\x00\x00", true},
		{"garbage, trailing NULs", `{"initializedAt":x` + "\x00\x00", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := camundaRoot(t)
			v3 := filepath.Join(root, "node-0", "v3")
			writeFiles(t, v3, map[string]string{MarkerName: tc.marker})
			before := snapshotTree(t, v3)
			_, res, err := Prepare(context.Background(), root, inst(0, 4), Options{Cluster: clusterA, Logger: quiet})
			switch {
			case tc.refused && !errors.Is(err, ErrUnrecognized):
				t.Fatalf("err = %v, want ErrUnrecognized", err)
			case !tc.refused && err != nil:
				t.Fatalf("err = %v", err)
			case !tc.refused && res.Source != 2:
				t.Errorf("source = %d, want v2", res.Source)
			}
			equalMaps(t, snapshotTree(t, v3), before)
		})
	}
}

// A crash during Camunda's marker write on a file system that persisted
// the size before the data (XFS, ext4 data=writeback, NFS write-behind)
// leaves a marker of NUL bytes, or a prefix followed by NULs: as incomplete
// as the empty and truncated markers above, and no reason to refuse. It
// used to be judged a complete unreadable marker: ErrUnrecognized (exit 6)
// at this and every later version, since it stays above every source.
func TestZeroFilledMarkerIsIncomplete(t *testing.T) {
	full := camundaMarker(3, ver(2))
	for name, marker := range map[string]string{
		"all NUL":        strings.Repeat("\x00", len(full)),
		"prefix and NUL": full[:20] + strings.Repeat("\x00", len(full)-20),
	} {
		t.Run(name, func(t *testing.T) {
			root, _ := camundaRoot(t)
			v3 := filepath.Join(root, "node-0", "v3")
			writeFiles(t, v3, map[string]string{MarkerName: marker})
			before := snapshotTree(t, v3)
			_, res, err := Prepare(context.Background(), root, inst(0, 4), Options{Cluster: clusterA, Logger: quiet})
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if res.Source != 2 {
				t.Errorf("source = %d, want v2", res.Source)
			}
			// Not ours: never deleted on that judgement.
			equalMaps(t, snapshotTree(t, v3), before)
		})
	}
}

// Camunda's BrokerDataDirectoryCopier links a file after a crash if any
// segment of its path is "snapshots" or "bootstrap-snapshots"; Zeebe keeps
// its snapshots in raft-partition/partitions/<p>/snapshots, so the preset
// must match at any depth, not only at the top (found by review).
func TestZeebePresetLinksSnapshotsAtAnyDepth(t *testing.T) {
	root := t.TempDir()
	rel := "raft-partition/partitions/1/snapshots/1-1-5-4/000042.sst"
	src := makeVersion(t, root, 0, 4, map[string]string{rel: "snapshot sst"}, 4)
	dir, res := mustPrepare(t, root, inst(0, 5), Options{Rules: zeebe(t)})
	if !sameInode(t, src, dir, rel) || res.FilesLinked != 1 || res.FilesCopied != 0 {
		t.Errorf("%s not hard-linked after a crash (filesCopied=%d, filesLinked=%d); Camunda's copier links it", rel, res.FilesCopied, res.FilesLinked)
	}
}

// The re-check after the marker, deterministically: an entry of the target
// deleted, or a copied file's size changed, between validation and the
// re-check (here, right after the marker) fails the preparation with
// ErrValidation; the marker is removed and the directory is our leftover
// again. A deletion after the re-check is the residual that no check of
// ours can close (see docs/datadir.md).
func TestTargetChangedAfterTheMarkerFailsThePreparation(t *testing.T) {
	files := map[string]string{
		"raft-partition/partitions/1/log-1.log":                    "journal",
		"raft-partition/partitions/1/snapshots/1-1-5-4/000042.sst": "snapshot",
	}
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, dir string)
	}{
		{"a copied file deleted", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "raft-partition/partitions/1/log-1.log")); err != nil {
				t.Fatal(err)
			}
		}},
		{"a linked file deleted", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "raft-partition/partitions/1/snapshots/1-1-5-4/000042.sst")); err != nil {
				t.Fatal(err)
			}
		}},
		{"a directory deleted", func(t *testing.T, dir string) {
			if err := os.RemoveAll(filepath.Join(dir, "raft-partition/partitions/1/snapshots")); err != nil {
				t.Fatal(err)
			}
		}},
		{"a copied file truncated", func(t *testing.T, dir string) {
			if err := os.Truncate(filepath.Join(dir, "raft-partition/partitions/1/log-1.log"), 0); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			v4 := makeVersion(t, root, 0, 4, files, -1)
			writeFiles(t, v4, map[string]string{MarkerName: camundaMarker(4, ver(3))})
			setHook(t, &testHookAfterMarker, func(dir string) { tc.change(t, dir) })
			opts := Options{Rules: zeebe(t), Tenure: "task-a", Logger: quiet}
			_, _, err := Prepare(context.Background(), root, inst(0, 5), opts)
			if !errors.Is(err, ErrValidation) {
				t.Fatalf("err = %v, want ErrValidation", err)
			}
			target := Dir(root, inst(0, 5))
			if exists(t, filepath.Join(target, MarkerName)) {
				t.Error("the marker stayed over a torn copy")
			}
			// Our failed target: removed (the marker first, durably).
			if exists(t, target) {
				t.Error("the failed target stayed")
			}
			testHookAfterMarker = nil
			dir, _ := mustPrepare(t, root, inst(0, 5), opts)
			equalMaps(t, contents(t, dir), files)
		})
	}
}
