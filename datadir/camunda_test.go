package datadir

import (
	"bytes"
	"encoding/json"
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
