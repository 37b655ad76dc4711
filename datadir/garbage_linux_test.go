package datadir

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeid/nodeid/nodeid"
)

// A removal renames a version out of the versions before it empties it
// (r24). What a crash (or a stale preparer's late write) leaves under a
// garbage name is finished by the next GC only if it is what a removal of
// ours renamed, judged as the original was; a leftover claimed but not yet
// renamed is ours, being removed: collected, and refused as a target.
func TestGarbageLeftByARemovalIsFinishedOnlyIfOurs(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{OwnerName: `{"bucket":"bucket-a","prefix":"prod/"}`})
	for v := nodeid.Version(1); v <= 3; v++ {
		makeVersion(t, root, 0, v, map[string]string{"data": "valid"}, v)
	}
	node := filepath.Join(root, "node-0")
	inProgress := func(v nodeid.Version, c Cluster) string {
		b, err := json.Marshal(map[string]any{"version": v, "bucket": c.Bucket, "prefix": c.Prefix, "tenure": "t"})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	marker := func(v nodeid.Version) string {
		b, err := json.Marshal(Marker{InitializedAt: time.Now(), Version: v})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	ours := map[string]map[string]string{
		".v1.11.nodeid-removing": {claimName: inProgress(1, clusterA), "a/b": "partial copy"},
		".v2.12.nodeid-removing": {MarkerName: marker(2), "a/b": "a valid version, renamed"},
		".v2.13.nodeid-removing": {removingName: marker(2), "a/b": "being removed"},
		".v2.14.nodeid-removing": {markerAsideName: marker(2)}, // a late marker after the rest went
		".v3.15.nodeid-removing": {},
		"v4":                     {claimName: inProgress(4, clusterA), "a/b": "claimed, not renamed yet"},
	}
	notOurs := map[string]map[string]string{
		".v3.16.nodeid-removing": {"a/b": "no claim, marker or in-progress file"},
		".v1.17.nodeid-removing": {claimName: inProgress(1, clusterB), "a/b": "another cluster's"},
		".v2.18.nodeid-removing": {claimName: inProgress(1, clusterA), "a/b": "names another version"},
		".v9.19.nodeid-removing": {claimName: inProgress(9, clusterA), "a/b": "above the current version"},
		".v1.nodeid-removing":    {claimName: inProgress(1, clusterA), "a/b": "not a garbage name"},
	}
	for name, files := range ours {
		if err := os.MkdirAll(filepath.Join(node, name), 0o750); err != nil {
			t.Fatal(err)
		}
		writeFiles(t, filepath.Join(node, name), files)
	}
	for name, files := range notOurs {
		if err := os.MkdirAll(filepath.Join(node, name), 0o750); err != nil {
			t.Fatal(err)
		}
		writeFiles(t, filepath.Join(node, name), files)
	}
	if err := os.Symlink("v3", filepath.Join(node, ".v2.20.nodeid-removing")); err != nil {
		t.Fatal(err)
	}
	notOurs[".v2.20.nodeid-removing"] = nil

	// A claimed target is being removed: refused, whatever the tenure.
	makeVersion(t, root, 0, 5, map[string]string{claimName: inProgress(5, clusterA)}, -1)
	if _, _, err := Prepare(context.Background(), root, inst(0, 5), Options{Cluster: clusterA, Tenure: "t", Logger: quiet}); !errors.Is(err, ErrVersionUsed) {
		t.Errorf("Prepare of a claimed v5: %v; want ErrVersionUsed", err)
	}

	removed, err := Collect(context.Background(), root, inst(0, 5), Options{Cluster: clusterA, Keep: 10, Logger: quiet})
	if err != nil {
		t.Fatalf("Collect: %v", err)
	}
	var got []string
	for _, p := range removed {
		got = append(got, filepath.Base(p))
	}
	var want []string
	for name := range ours {
		want = append(want, name)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("removed %v; want %v", got, want)
	}
	entries, err := os.ReadDir(node)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	for name := range ours {
		if slices.Contains(left, name) {
			t.Errorf("%s left in place; it is ours", name)
		}
	}
	for name := range notOurs {
		if !slices.Contains(left, name) {
			t.Errorf("%s removed; it is not positively ours", name)
		}
	}
	for _, v := range []string{"v1", "v2", "v3", "v5"} {
		if !slices.Contains(left, v) {
			t.Errorf("%s removed; want it kept", v)
		}
	}
	if b, err := os.ReadFile(filepath.Join(node, "v3", "data")); err != nil || string(b) != "valid" {
		t.Errorf("v3/data = %q, %v: the symlink to it was followed", b, err)
	}
}

// The window the rename out of the versions closes for good: a stale
// preparer A writes its marker aside anew and links it after the removal
// listed its leftover v2 (its recheck passed before anything was
// removed), and the removal then stops (here an immutable file stands for
// a crash or an I/O error). Emptied in place, v2 would be a valid version
// over a torn copy, and B's GC would keep it and delete v1. Moved out of
// the versions first, A's marker lands in garbage.
func TestLateMarkerDuringARemovalThatStopsNeverMakesAVersion(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{}
	for i := range 20 {
		files[fmt.Sprintf("f%02d", i)] = "data"
	}
	makeVersion(t, root, 0, 1, files, 1)
	v2 := Dir(root, inst(0, 2))
	if err := os.MkdirAll(v2, 0o750); err != nil {
		t.Fatal(err)
	}
	writePreparingTenure(t, v2, 2, Cluster{}, "task-A")
	writeFiles(t, v2, files)
	writeFiles(t, v2, map[string]string{"stuck": "x"})
	setImmutable(t, filepath.Join(v2, "stuck"))
	t.Cleanup(func() { clearImmutableBelow(root) })
	d2, err := os.Open(v2) // A's held descriptor
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	published := false
	setHook(t, &testHookGarbageListed, func(string) {
		if published {
			return
		}
		published = true
		one := nodeid.Version(1)
		if err := writeMarkerAside(d2, Marker{InitializedAt: time.Now(), Version: 2, InitializedFrom: &one}); err != nil {
			t.Errorf("A's marker aside: %v", err)
			return
		}
		if err := unix.Linkat(int(d2.Fd()), markerAsideName, int(d2.Fd()), MarkerName, 0); err != nil {
			t.Errorf("A's publishMarker: %v", err)
		}
	})
	_, res, err := Prepare(context.Background(), root, inst(0, 3), Options{Tenure: "task-B", Logger: quiet})
	testHookGarbageListed = nil
	if err != nil {
		t.Fatalf("B: %v", err)
	}
	if !published {
		t.Fatal("the removal of v2 never listed it: schedule not reached")
	}
	if d, err := os.Open(v2); err == nil {
		_, merr := readMarker(d, 2)
		d.Close()
		if merr == nil {
			t.Errorf("v2 is a valid version after its removal started and stopped (A's late marker over a torn copy)")
		}
	}
	if res.Source != 1 || !exists(t, Dir(root, inst(0, 1))) {
		t.Errorf("v3 from v%d, v1 kept: %v; want v3 from v1 and v1 kept (keep 2: v3, v1)", res.Source, exists(t, Dir(root, inst(0, 1))))
	}
}
