package datadir

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
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
	"snapshots/1-1-5-4/000042.sst":           "snapshot sst",
	"snapshots/1-1-5-4/CHECKSUM":             "snapshot checksum",
	"bootstrap-snapshots/1/000007.sst":       "bootstrap sst",
	"raft-partition/partitions/1/log-1.log":  "journal",
	"raft-partition/partitions/1/.conf":      "raft conf",
	"raft-partition/snapshots/x":             "not a top-level snapshot",
	"runtime/000050.sst":                     "runtime state",
	"runtime/CURRENT":                        "MANIFEST",
	"raft-partition/partitions/1/runtime/db": "nested runtime",
	"partitions/2/runtime":                   "a file named runtime",
	"runtimes/x":                             "not named runtime",
}

func TestZeebePreset(t *testing.T) {
	var carried, linkedAfterCrash []string
	for rel := range zeebeFiles {
		if !(CopyRules{SkipSegment: []string{"runtime"}}).skips(rel) {
			carried = append(carried, rel)
		}
	}
	linkedAfterCrash = []string{"snapshots/1-1-5-4/000042.sst", "snapshots/1-1-5-4/CHECKSUM", "bootstrap-snapshots/1/000007.sst"}
	want := map[string]string{}
	for _, rel := range carried {
		want[rel] = zeebeFiles[rel]
	}
	if len(want) != 7 {
		t.Fatalf("test data: %d files carried over, want 7: %v", len(want), carried)
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
		if r, err := Preset(name); err != nil || r.SkipSegment != nil || r.LinkAfterCrash != nil {
			t.Errorf("Preset(%q) = %+v, %v; want no rules", name, r, err)
		}
	}
	if _, err := Preset("Zeebe"); !errors.Is(err, ErrInvalid) {
		t.Errorf("Preset(Zeebe): err = %v, want ErrInvalid", err)
	}
	for _, r := range []CopyRules{
		{SkipSegment: []string{""}}, {SkipSegment: []string{"a/b"}}, {SkipSegment: []string{".."}},
		{LinkAfterCrash: []string{""}}, {LinkAfterCrash: []string{"/snapshots"}}, {LinkAfterCrash: []string{"../x"}},
		{LinkAfterCrash: []string{"snapshots/"}}, {LinkAfterCrash: []string{"."}},
	} {
		if _, _, err := Prepare(context.Background(), t.TempDir(), inst(0, 1), Options{Rules: r, Logger: quiet}); !errors.Is(err, ErrInvalid) {
			t.Errorf("Rules %+v: err = %v, want ErrInvalid", r, err)
		}
	}
}
