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
	"sync"
	"testing"
	"time"

	"github.com/nodeid/nodeid/nodeid"
)

// quiet discards logs so test output stays readable.
var quiet = slog.New(slog.DiscardHandler)

func inst(id int, v nodeid.Version) nodeid.NodeInstance {
	return nodeid.NodeInstance{ID: id, Version: v}
}

// writeFiles creates files (name -> content) below dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// makeVersion creates node-id/v<v> with files and, if markerVersion >= 0, a
// well-formed marker naming markerVersion.
func makeVersion(t *testing.T, root string, id int, v nodeid.Version, files map[string]string, markerVersion nodeid.Version) string {
	t.Helper()
	dir := Dir(root, inst(id, v))
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, files)
	if markerVersion >= 0 {
		b, err := json.Marshal(Marker{InitializedAt: time.Now(), Version: markerVersion})
		if err != nil {
			t.Fatal(err)
		}
		writeFiles(t, dir, map[string]string{MarkerName: string(b)})
	}
	return dir
}

// contents returns every regular file (path -> content) and symlink
// (path -> "-> target") below dir, without the marker.
func contents(t *testing.T, dir string) map[string]string {
	t.Helper()
	return readTree(t, dir, func(rel string, d fs.DirEntry) bool {
		return rel != MarkerName && (d.Type()&fs.ModeSymlink != 0 || d.Type().IsRegular())
	})
}

// readTree returns the entries below root that keep admits, by slash
// path: directories as "dir", symlinks as "-> target", other files with
// their content.
func readTree(t *testing.T, root string, keep func(rel string, d fs.DirEntry) bool) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		switch {
		case !keep(rel, d):
		case d.IsDir():
			got[rel] = "dir"
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			got[rel] = "-> " + target
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			got[rel] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func equalMaps(t *testing.T, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("got %d entries %v, want %d %v", len(got), keys(got), len(want), keys(want))
	}
	for k, w := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("%s missing", k)
		} else if g != w {
			t.Errorf("%s = %q, want %q", k, g, w)
		}
	}
}

func keys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func readMarkerFile(t *testing.T, dir string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, MarkerName))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("marker %s: %v", b, err)
	}
	return m
}

func exists(t *testing.T, p string) bool {
	t.Helper()
	_, err := os.Lstat(p)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

func mustPrepare(t *testing.T, root string, in nodeid.NodeInstance, opts Options) (string, Result) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	dir, res, err := Prepare(context.Background(), root, in, opts)
	if err != nil {
		t.Fatalf("Prepare(%v): %v", in, err)
	}
	return dir, res
}

func TestPrepareEmpty(t *testing.T) {
	root := t.TempDir()
	dir, res := mustPrepare(t, root, inst(3, 7), Options{})
	if want := filepath.Join(root, "node-3", "v7"); dir != want {
		t.Fatalf("dir = %s, want %s", dir, want)
	}
	if res.HasSource || res.FilesCopied != 0 || res.FilesLinked != 0 || res.Redone {
		t.Errorf("result = %+v, want an empty preparation", res)
	}
	if got := contents(t, dir); len(got) != 0 {
		t.Errorf("new directory holds %v", got)
	}
	for _, p := range []string{filepath.Join(root, "node-3"), dir} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o750 {
			t.Errorf("%s mode %v, want 0750", p, fi.Mode().Perm())
		}
	}
	if m := camundaForm(t, dir); m.Version != 7 || m.InitializedFrom != nil {
		t.Errorf("marker = %+v", m)
	}
}

func TestPrepareDirMode(t *testing.T) {
	root := t.TempDir()
	dir, _ := mustPrepare(t, root, inst(0, 0), Options{DirMode: 0o700})
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("mode %v, want 0700", fi.Mode().Perm())
	}
}

func TestPrepareFromV0(t *testing.T) {
	root := t.TempDir()
	v0, _ := mustPrepare(t, root, inst(1, 0), Options{})
	files := map[string]string{"a": "alpha", "sub/b": "beta", "sub/deeper/c": ""}
	writeFiles(t, v0, files)

	v1, res := mustPrepare(t, root, inst(1, 1), Options{})
	if !res.HasSource || res.Source != 0 {
		t.Fatalf("source = %v/%d, want v0", res.HasSource, res.Source)
	}
	if res.FilesCopied != 3 || res.BytesCopied != int64(len("alpha")+len("beta")) || res.FilesLinked != 0 {
		t.Errorf("result = %+v", res)
	}
	equalMaps(t, contents(t, v1), files)
	if m := readMarkerFile(t, v1); m["version"] != float64(1) || m["initializedFrom"] != float64(0) {
		t.Errorf("marker = %v", m)
	}
	// A copy is independent of its source.
	writeFiles(t, v1, map[string]string{"a": "changed"})
	if b, _ := os.ReadFile(filepath.Join(v0, "a")); string(b) != "alpha" {
		t.Errorf("writing the copy changed the source: %q", b)
	}
}

func TestSourceIsNewestValidBelow(t *testing.T) {
	root := t.TempDir()
	makeVersion(t, root, 2, 1, map[string]string{"from": "v1"}, 1)
	makeVersion(t, root, 2, 2, map[string]string{"from": "v2"}, 2)
	makeVersion(t, root, 2, 3, map[string]string{"from": "v3 no marker, not ours"}, -1)
	v4 := makeVersion(t, root, 2, 4, map[string]string{"from": "v4 our leftover"}, -1)
	writePreparing(t, v4, 4, Cluster{})
	v5 := makeVersion(t, root, 2, 5, map[string]string{"from": "v5 our leftover, corrupt marker"}, -1)
	writePreparing(t, v5, 5, Cluster{})
	writeFiles(t, v5, map[string]string{MarkerName: `{"initializedAt":"2025-01-01T00:00:00Z","vers`})
	makeVersion(t, root, 2, 6, nil, -1) // empty
	makeVersion(t, root, 2, 9, map[string]string{"from": "v9 newer, no marker"}, -1)
	// Not version directories: ignored.
	makeVersion(t, root, 2, 0, nil, -1)
	writeFiles(t, filepath.Join(root, "node-2"), map[string]string{"v08/" + MarkerName: `{}`, "vx/a": "", "notes": ""})

	dir, res := mustPrepare(t, root, inst(2, 7), Options{Keep: 10})
	if !res.HasSource || res.Source != 2 {
		t.Fatalf("source = %v/%d, want v2", res.HasSource, res.Source)
	}
	equalMaps(t, contents(t, dir), map[string]string{"from": "v2"})
	// Our leftovers and empty directories below the current version go.
	for _, v := range []string{"v0", "v4", "v5", "v6"} {
		if exists(t, filepath.Join(root, "node-2", v)) {
			t.Errorf("%s not removed", v)
		}
	}
	for _, v := range []string{"v1", "v2", "v3", "v9", "v08", "vx", "notes"} {
		if !exists(t, filepath.Join(root, "node-2", v)) {
			t.Errorf("%s removed", v)
		}
	}
}

func TestTargetAlreadyInitialized(t *testing.T) {
	root := t.TempDir()
	makeVersion(t, root, 0, 1, map[string]string{"a": "old"}, 1)
	dir := makeVersion(t, root, 0, 2, map[string]string{"mine": "data"}, 2)
	_, _, err := Prepare(context.Background(), root, inst(0, 2), Options{Logger: quiet})
	if !errors.Is(err, ErrVersionUsed) {
		t.Fatalf("err = %v, want ErrVersionUsed", err)
	}
	equalMaps(t, contents(t, dir), map[string]string{"mine": "data"})
}

func TestLeftoversAreRedone(t *testing.T) {
	for _, tc := range []struct{ name, marker string }{
		{"no marker", ""},
		{"empty marker", "-"},
		{"truncated marker", `{"initializedAt":"2025-01-01T00:00:00Z","version":`},
		{"marker for another version", `{"initializedAt":"2025-01-01T00:00:00Z","version":5,"initializedFrom":1}`},
		{"marker with trailing garbage", `{"initializedAt":"2025-01-01T00:00:00Z","version":2,"initializedFrom":1}x`},
		{"initializedFrom not below", `{"initializedAt":"2025-01-01T00:00:00Z","version":2,"initializedFrom":2}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			makeVersion(t, root, 0, 1, map[string]string{"a": "alpha", "sub/b": "beta"}, 1)
			target := makeVersion(t, root, 0, 2, map[string]string{"a": "half", "junk/x": "leftover"}, -1)
			writePreparingTenure(t, target, 2, Cluster{}, "task-1")
			switch tc.marker {
			case "":
			case "-":
				writeFiles(t, target, map[string]string{MarkerName: ""})
			default:
				writeFiles(t, target, map[string]string{MarkerName: tc.marker})
			}
			dir, res := mustPrepare(t, root, inst(0, 2), Options{Tenure: "task-1"})
			if !res.Redone {
				t.Error("Redone = false")
			}
			equalMaps(t, contents(t, dir), map[string]string{"a": "alpha", "sub/b": "beta"})
			if m := readMarkerFile(t, dir); m["version"] != float64(2) {
				t.Errorf("marker = %v", m)
			}
		})
	}
}

func TestLinkOrCopyPerFile(t *testing.T) {
	files := map[string]string{
		"snapshots/1/data.sst": "immutable data",
		"snapshots/1/meta":     "immutable meta",
		"log/segment-1":        "mutable log",
		"state.db":             "mutable state",
	}
	for _, tc := range []struct {
		name     string
		opts     Options
		linked   []string
		nCopied  int64
		nLinked  int64
		bCopied  int64
		bLinkled int64
	}{
		{
			name:    "ungraceful links only immutable files",
			opts:    Options{Immutable: []string{"snapshots/**"}},
			linked:  []string{"snapshots/1/data.sst", "snapshots/1/meta"},
			nCopied: 2, nLinked: 2,
			bCopied: int64(len("mutable log") + len("mutable state")), bLinkled: int64(len("immutable data") + len("immutable meta")),
		},
		{
			name:    "ungraceful without patterns copies everything",
			opts:    Options{},
			nCopied: 4,
			bCopied: 52,
		},
		{
			name:    "graceful links everything",
			opts:    Options{PreviousGraceful: true, Immutable: []string{"snapshots/**"}},
			linked:  keys(files),
			nLinked: 4, bLinkled: 52,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			src := makeVersion(t, root, 0, 4, files, 4)
			dir, res := mustPrepare(t, root, inst(0, 5), tc.opts)
			equalMaps(t, contents(t, dir), files)
			if res.FilesCopied != tc.nCopied || res.FilesLinked != tc.nLinked || res.BytesCopied != tc.bCopied || res.BytesLinked != tc.bLinkled {
				t.Errorf("result = %+v", res)
			}
			for name := range files {
				si, err := os.Stat(filepath.Join(src, name))
				if err != nil {
					t.Fatal(err)
				}
				di, err := os.Stat(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				if want := slices.Contains(tc.linked, name); os.SameFile(si, di) != want {
					t.Errorf("%s: hard link = %v, want %v", name, !want, want)
				}
			}
		})
	}
}

func TestSkipPatternsAndMarkerNotCopied(t *testing.T) {
	for _, graceful := range []bool{false, true} {
		t.Run(fmt.Sprintf("graceful=%v", graceful), func(t *testing.T) {
			root := t.TempDir()
			makeVersion(t, root, 0, 1, map[string]string{
				"runtime/x":         "r",
				"runtime/sub/y":     "r",
				"data/x.lock":       "l",
				"top.lock":          "l",
				"data/keep":         "k",
				"data/runtime/z":    "not top-level runtime",
				"sub/" + MarkerName: "a nested file of that name is data",
			}, 1)
			dir, res := mustPrepare(t, root, inst(0, 2), Options{PreviousGraceful: graceful, Skip: []string{"runtime/**", "**/*.lock"}})
			equalMaps(t, contents(t, dir), map[string]string{
				"data/keep":         "k",
				"data/runtime/z":    "not top-level runtime",
				"sub/" + MarkerName: "a nested file of that name is data",
			})
			// runtime (whole directory), data/x.lock, top.lock, the marker.
			if res.Skipped != 4 {
				t.Errorf("Skipped = %d, want 4", res.Skipped)
			}
			if m := readMarkerFile(t, dir); m["version"] != float64(2) || m["initializedFrom"] != float64(1) {
				t.Errorf("marker = %v", m)
			}
		})
	}
}

// Subdirectories keep the permissions and times of their source, in both
// modes, as with cp -a.
func TestSubdirectoryModeAndTimes(t *testing.T) {
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	for _, graceful := range []bool{false, true} {
		t.Run(fmt.Sprintf("graceful=%v", graceful), func(t *testing.T) {
			root := t.TempDir()
			src := makeVersion(t, root, 0, 1, map[string]string{"private/a": "a", "open/b": "b"}, 1)
			for d, mode := range map[string]fs.FileMode{"private": 0o700, "open": 0o755} {
				p := filepath.Join(src, d)
				if err := os.Chmod(p, mode); err != nil {
					t.Fatal(err)
				}
				if err := os.Chtimes(p, mtime, mtime); err != nil {
					t.Fatal(err)
				}
			}
			dir, _ := mustPrepare(t, root, inst(0, 2), Options{PreviousGraceful: graceful})
			for d, mode := range map[string]fs.FileMode{"private": 0o700, "open": 0o755} {
				fi, err := os.Stat(filepath.Join(dir, d))
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode().Perm() != mode || !fi.ModTime().Equal(mtime) {
					t.Errorf("%s: mode %v mtime %v, want %v %v", d, fi.Mode().Perm(), fi.ModTime(), mode, mtime)
				}
			}
		})
	}
}

func TestSymlinksInsideAreRecreated(t *testing.T) {
	root := t.TempDir()
	src := makeVersion(t, root, 0, 1, map[string]string{"data/keep": "k"}, 1)
	for link, target := range map[string]string{
		"rel":      "data/keep",
		"data/up":  "../data/keep",
		"dangling": "not-there",
		"dirlink":  "data",
	} {
		if err := os.Symlink(target, filepath.Join(src, link)); err != nil {
			t.Fatal(err)
		}
	}
	for _, graceful := range []bool{false, true} {
		_, res := mustPrepare(t, root, inst(0, 2), Options{PreviousGraceful: graceful, Keep: 10})
		if res.Symlinks != 4 {
			t.Errorf("graceful=%v: Symlinks = %d, want 4", graceful, res.Symlinks)
		}
		if err := os.RemoveAll(Dir(root, inst(0, 2))); err != nil {
			t.Fatal(err)
		}
	}
	dir, res := mustPrepare(t, root, inst(0, 2), Options{})
	equalMaps(t, contents(t, dir), map[string]string{
		"data/keep": "k",
		"rel":       "-> data/keep",
		"data/up":   "-> ../data/keep",
		"dangling":  "-> not-there",
		"dirlink":   "-> data",
	})
	if res.Symlinks != 4 || res.FilesCopied != 1 {
		t.Errorf("result = %+v", res)
	}
}

func TestSymlinksOutsideAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		links map[string]string // in the source; %s is replaced by the outside dir
	}{
		{"absolute", map[string]string{"evil": "%s/secret"}},
		{"absolute directory", map[string]string{"snapshots": "%s"}},
		{"absolute into the tree", map[string]string{"self": "/proc/self/cwd"}},
		{"relative escape", map[string]string{"data/evil": "../../../../outside/secret"}},
		{"escape through another link", map[string]string{"b": ".", "a": "b/../secret"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			root := filepath.Join(base, "root")
			outside := filepath.Join(base, "outside")
			writeFiles(t, outside, map[string]string{"secret": "do not read"})
			src := makeVersion(t, root, 0, 1, map[string]string{"data/keep": "k"}, 1)
			for link, target := range tc.links {
				target = strings.ReplaceAll(target, "%s", outside)
				if err := os.Symlink(target, filepath.Join(src, link)); err != nil {
					t.Fatal(err)
				}
			}
			for _, graceful := range []bool{false, true} {
				// The same tenure retries, and redoes its leftover.
				_, _, err := Prepare(context.Background(), root, inst(0, 2), Options{Logger: quiet, PreviousGraceful: graceful, Tenure: "task-1"})
				if !errors.Is(err, ErrUnsafeSymlink) {
					t.Fatalf("graceful=%v: err = %v, want ErrUnsafeSymlink", graceful, err)
				}
			}
			if exists(t, filepath.Join(Dir(root, inst(0, 2)), MarkerName)) {
				t.Error("marker written despite an unsafe link")
			}
			equalMaps(t, contents(t, outside), map[string]string{"secret": "do not read"})
		})
	}
}

func TestSymlinkedDirectoriesAreNotFollowed(t *testing.T) {
	t.Run("version directory", func(t *testing.T) {
		base := t.TempDir()
		root := filepath.Join(base, "root")
		// A valid-looking v1 outside root, linked in as node-0/v1.
		outside := makeVersion(t, filepath.Join(base, "outside"), 0, 1, map[string]string{"secret": "s"}, 1)
		if err := os.MkdirAll(filepath.Join(root, "node-0"), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, filepath.Join(root, "node-0", "v1")); err != nil {
			t.Fatal(err)
		}
		// Never followed, so never judged: it may be the newest data.
		_, res, err := Prepare(context.Background(), root, inst(0, 2), Options{Logger: quiet})
		if !errors.Is(err, ErrUnrecognized) {
			t.Errorf("Prepare = %v (source %v/v%d), want ErrUnrecognized", err, res.HasSource, res.Source)
		}
		if exists(t, Dir(root, inst(0, 2))) {
			t.Error("target created")
		}
		// Below a valid source, GC leaves the link alone: Prepare did not
		// make it.
		makeVersion(t, root, 0, 2, map[string]string{"a": "b"}, 2)
		_, res = mustPrepare(t, root, inst(0, 3), Options{Keep: 1})
		if res.Source != 2 {
			t.Errorf("source v%d, want v2", res.Source)
		}
		if !exists(t, filepath.Join(root, "node-0", "v1")) {
			t.Error("symlink v1 removed")
		}
		equalMaps(t, contents(t, outside), map[string]string{"secret": "s"})
		if !exists(t, filepath.Join(outside, MarkerName)) {
			t.Error("marker behind the link removed")
		}
	})
	t.Run("node directory", func(t *testing.T) {
		base := t.TempDir()
		root := filepath.Join(base, "root")
		outside := filepath.Join(base, "outside")
		for _, d := range []string{root, outside} {
			if err := os.MkdirAll(d, 0o750); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink(outside, filepath.Join(root, "node-0")); err != nil {
			t.Fatal(err)
		}
		_, _, err := Prepare(context.Background(), root, inst(0, 1), Options{Logger: quiet})
		if !errors.Is(err, ErrUnsafeSymlink) {
			t.Fatalf("err = %v, want ErrUnsafeSymlink", err)
		}
		if entries, _ := os.ReadDir(outside); len(entries) != 0 {
			t.Errorf("wrote %d entries outside root", len(entries))
		}
	})
}

// setHook installs a test hook for the duration of the test.
func setHook[F any](t testing.TB, hook *F, f F) {
	var zero F
	*hook = f
	t.Cleanup(func() { *hook = zero })
}

func TestValidation(t *testing.T) {
	files := map[string]string{"a": "alpha", "log/seg": "0123456789", "snap/s": "snapshot"}
	for _, tc := range []struct {
		name    string
		opts    Options
		tamper  func(t *testing.T, src, dst string)
		wantErr bool
	}{
		{"source grew after copy", Options{}, func(t *testing.T, src, _ string) {
			writeFiles(t, src, map[string]string{"log/seg": "0123456789 and more"})
		}, true},
		{"new source file after copy", Options{}, func(t *testing.T, src, _ string) {
			writeFiles(t, src, map[string]string{"log/seg2": "x"})
		}, true},
		{"copy removed", Options{}, func(t *testing.T, _, dst string) {
			if err := os.Remove(filepath.Join(dst, "a")); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"copy replaced by a directory", Options{}, func(t *testing.T, _, dst string) {
			if err := os.Remove(filepath.Join(dst, "a")); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(dst, "a"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"link replaced by a copy", Options{Immutable: []string{"snap/**"}}, func(t *testing.T, _, dst string) {
			p := filepath.Join(dst, "snap", "s")
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			writeFiles(t, dst, map[string]string{"snap/s": "snapshot"})
		}, true},
		{"graceful link replaced by a copy", Options{PreviousGraceful: true}, func(t *testing.T, _, dst string) {
			if err := os.Remove(filepath.Join(dst, "a")); err != nil {
				t.Fatal(err)
			}
			writeFiles(t, dst, map[string]string{"a": "alpha"})
		}, true},
		{"graceful, new source file after linking", Options{PreviousGraceful: true}, func(t *testing.T, src, _ string) {
			writeFiles(t, src, map[string]string{"log/seg2": "x"})
		}, true},
		{"mutable file shared", Options{}, func(t *testing.T, src, dst string) {
			p := filepath.Join(dst, "a")
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := os.Link(filepath.Join(src, "a"), p); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"same size, other content, verified", Options{VerifyContent: true}, func(t *testing.T, _, dst string) {
			writeFiles(t, dst, map[string]string{"log/seg": "0123456780"})
		}, true},
		// A copy after a crash is always compared byte by byte: a stale
		// holder's stores through a shared mapping move no stamp.
		{"same size, other content, after a crash", Options{}, func(t *testing.T, _, dst string) {
			writeFiles(t, dst, map[string]string{"log/seg": "0123456780"})
		}, true},
		{"untouched, verified", Options{VerifyContent: true}, func(*testing.T, string, string) {}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			src := makeVersion(t, root, 0, 1, files, 1)
			setHook(t, &testHookBeforeValidate, func(dst string) { tc.tamper(t, src, dst) })
			opts := tc.opts
			opts.Logger, opts.Tenure = quiet, "task-1"
			_, _, err := Prepare(context.Background(), root, inst(0, 2), opts)
			target := Dir(root, inst(0, 2))
			if !tc.wantErr {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrValidation) {
				t.Fatalf("err = %v, want ErrValidation", err)
			}
			if exists(t, filepath.Join(target, MarkerName)) {
				t.Fatal("marker written for an invalid copy")
			}
			// The failed target is removed; next time round it is made anew.
			if exists(t, target) {
				t.Error("the failed target stayed")
			}
			testHookBeforeValidate = nil
			mustPrepare(t, root, inst(0, 2), opts)
			equalMaps(t, contents(t, target), contents(t, src))
		})
	}
}

func TestInvalidArgumentsTouchNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   nodeid.NodeInstance
		opts Options
	}{
		{"negative keep", inst(0, 1), Options{Keep: -1}},
		{"dir mode without owner x", inst(0, 1), Options{DirMode: 0o640}},
		{"dir mode with type bits", inst(0, 1), Options{DirMode: fs.ModeDir | 0o750}},
		{"bad skip pattern", inst(0, 1), Options{Skip: []string{"[a"}}},
		{"absolute immutable pattern", inst(0, 1), Options{Immutable: []string{"/snapshots/**"}}},
		{"dot-dot pattern", inst(0, 1), Options{Skip: []string{"../x"}}},
		{"empty pattern", inst(0, 1), Options{Skip: []string{""}}},
		{"negative workers", inst(0, 1), Options{Workers: -1}},
		{"negative progress interval", inst(0, 1), Options{ProgressInterval: -time.Second}},
		{"cluster prefix without a bucket", inst(0, 1), Options{Cluster: Cluster{Prefix: "prod/"}}},
		{"negative id", inst(-1, 1), Options{}},
		{"negative version", inst(0, -1), Options{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			_, _, err := Prepare(context.Background(), root, tc.in, tc.opts)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			if entries, _ := os.ReadDir(root); len(entries) != 0 {
				t.Errorf("root holds %d entries", len(entries))
			}
			// Options are checked before the root is.
			if _, _, err := Prepare(context.Background(), filepath.Join(root, "missing"), tc.in, tc.opts); !errors.Is(err, ErrInvalid) {
				t.Errorf("with a missing root: err = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestBadRoot(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "file")
	writeFiles(t, base, map[string]string{"file": ""})
	for name, root := range map[string]string{
		"missing":      filepath.Join(base, "missing"),
		"not a dir":    file,
		"empty":        "",
		"below a file": filepath.Join(file, "x"),
		"not writable": readOnlyDir(t),
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := Prepare(context.Background(), root, inst(0, 1), Options{Logger: quiet})
			if !errors.Is(err, ErrRoot) {
				t.Fatalf("err = %v, want ErrRoot", err)
			}
			if _, err := Collect(context.Background(), root, inst(0, 1), Options{}); !errors.Is(err, ErrRoot) {
				t.Fatalf("Collect: err = %v, want ErrRoot", err)
			}
		})
	}
}

func versionsOf(t *testing.T, root string, id int) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root, nodeDirName(id)))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.SortFunc(names, func(a, b string) int {
		va, _ := parseVersionDirName(a)
		vb, _ := parseVersionDirName(b)
		return int(va - vb)
	})
	return names
}

func TestGarbageCollection(t *testing.T) {
	// Valid v1, v2, v4, v5; v3 our leftover (crashed); v8 invalid and newer: a
	// preparation by the task that holds the node after us may be running.
	setup := func(t *testing.T) string {
		root := t.TempDir()
		for _, v := range []nodeid.Version{1, 2, 4, 5} {
			makeVersion(t, root, 0, v, map[string]string{"v": fmt.Sprint(v)}, v)
		}
		writePreparing(t, makeVersion(t, root, 0, 3, map[string]string{"v": "3"}, -1), 3, Cluster{})
		makeVersion(t, root, 0, 8, map[string]string{"partial": "8"}, -1)
		return root
	}
	for _, tc := range []struct {
		keep int
		want []string
	}{
		{0, []string{"v5", "v6", "v8"}}, // default 2: v6 and v5
		{1, []string{"v6", "v8"}},
		{2, []string{"v5", "v6", "v8"}},
		{3, []string{"v4", "v5", "v6", "v8"}},
		{10, []string{"v1", "v2", "v4", "v5", "v6", "v8"}},
	} {
		t.Run(fmt.Sprintf("prepare keep %d", tc.keep), func(t *testing.T) {
			root := setup(t)
			_, res := mustPrepare(t, root, inst(0, 6), Options{Keep: tc.keep})
			if got := versionsOf(t, root, 0); !slices.Equal(got, tc.want) {
				t.Errorf("left %v, want %v", got, tc.want)
			}
			if len(res.Removed) != 7-len(tc.want) { // v1-v6 and v8 before
				t.Errorf("Removed = %v", res.Removed)
			}
			equalMaps(t, contents(t, filepath.Join(root, "node-0", "v8")), map[string]string{"partial": "8"})
		})
	}
	t.Run("nothing at or above the current version", func(t *testing.T) {
		root := setup(t)
		// A stale task with v2 collects: v5 and v4 are the newest valid
		// versions; v2 is its own; v1 goes, v3 (invalid, newer) stays.
		removed, err := Collect(context.Background(), root, inst(0, 2), Options{Keep: 2})
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{filepath.Join(root, "node-0", "v1")}; !slices.Equal(removed, want) {
			t.Errorf("removed %v, want %v", removed, want)
		}
		if got, want := versionsOf(t, root, 0), []string{"v2", "v3", "v4", "v5", "v8"}; !slices.Equal(got, want) {
			t.Errorf("left %v, want %v", got, want)
		}
	})
	t.Run("invalid arguments", func(t *testing.T) {
		root := setup(t)
		if _, err := Collect(context.Background(), root, inst(0, 6), Options{Keep: -1}); !errors.Is(err, ErrInvalid) {
			t.Errorf("err = %v, want ErrInvalid", err)
		}
		if _, err := Collect(context.Background(), root, inst(0, -6), Options{Keep: 1}); !errors.Is(err, ErrInvalid) {
			t.Errorf("err = %v, want ErrInvalid", err)
		}
		if got := versionsOf(t, root, 0); len(got) != 6 {
			t.Errorf("left %v", got)
		}
	})
	t.Run("missing node directory", func(t *testing.T) {
		removed, err := Collect(context.Background(), t.TempDir(), inst(4, 6), Options{Keep: 1})
		if err != nil || len(removed) != 0 {
			t.Errorf("Collect = %v, %v", removed, err)
		}
	})
}

func TestCancelledMidCopy(t *testing.T) {
	for _, graceful := range []bool{false, true} {
		t.Run(fmt.Sprintf("graceful=%v", graceful), func(t *testing.T) {
			root := t.TempDir()
			files := map[string]string{}
			for i := range 20 {
				files[fmt.Sprintf("f%02d", i)] = strings.Repeat("x", i)
			}
			makeVersion(t, root, 0, 1, files, 1)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			n := 0
			setHook(t, &testHookFile, func(string) {
				if n++; n == 5 {
					cancel()
				}
			})
			opts := Options{Logger: quiet, PreviousGraceful: graceful, Tenure: "task-1"}
			_, _, err := Prepare(ctx, root, inst(0, 2), opts)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
			target := Dir(root, inst(0, 2))
			if n < 5 || n >= len(files) {
				t.Errorf("%d files started before cancellation, want some", n)
			}
			// The failed (cancelled) target is removed.
			if exists(t, target) {
				t.Fatalf("the cancelled target stayed: %v", keys(contents(t, target)))
			}
			testHookFile = nil
			dir, _ := mustPrepare(t, root, inst(0, 2), opts)
			equalMaps(t, contents(t, dir), files)
		})
	}
}

func TestWorkers(t *testing.T) {
	files := map[string]string{}
	for i := range 80 {
		// 20 leaf directories: workers copy and link in several
		// directories at once, and a directory is finished (times, mode)
		// only once its files are done.
		files[fmt.Sprintf("d%d/e%d/f%d", i%4, i%5, i)] = strings.Repeat("y", i*100)
	}
	for _, tc := range []struct {
		name           string
		opts           Options
		linked, copied int64
	}{
		{"mixed", Options{Workers: 4, Immutable: []string{"d0/**"}, VerifyContent: true}, 20, 60},
		{"graceful", Options{Workers: 4, PreviousGraceful: true}, 80, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			makeVersion(t, root, 0, 1, files, 1)
			dir, res := mustPrepare(t, root, inst(0, 2), tc.opts)
			equalMaps(t, contents(t, dir), files)
			if res.FilesLinked != tc.linked || res.FilesCopied != tc.copied {
				t.Errorf("result = %+v", res)
			}
		})
	}
}

// recorder is a slog.Handler that keeps records.
type recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func TestProgressIsLogged(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{}
	for i := range 10 {
		files[fmt.Sprintf("f%d", i)] = "0123456789"
	}
	makeVersion(t, root, 0, 1, files, 1)
	// Slow the copy down so that the ticker fires while files remain.
	setHook(t, &testHookFile, func(string) { time.Sleep(3 * time.Millisecond) })
	rec := &recorder{}
	mustPrepare(t, root, inst(0, 2), Options{Logger: slog.New(rec), ProgressInterval: time.Millisecond})

	rec.mu.Lock()
	defer rec.mu.Unlock()
	var progress, final int
	for _, r := range rec.recs {
		attrs := map[string]slog.Value{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value; return true })
		switch r.Message {
		case "copying":
			if attrs["files_copied"].Int64() > 0 && attrs["bytes_copied"].Int64() > 0 {
				progress++
			}
		case "prepared":
			if attrs["files_copied"].Int64() == 10 && attrs["bytes_copied"].Int64() == 100 {
				final++
			}
		}
	}
	if progress == 0 || final != 1 {
		t.Errorf("%d progress records with files and bytes, %d final records; want > 0 and 1", progress, final)
	}
}

func TestPatterns(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		yes, no []string
	}{
		{"runtime/**", []string{"runtime", "runtime/a", "runtime/a/b"}, []string{"x/runtime", "runtimes", "runtime2/a"}},
		{"**/*.lock", []string{"a.lock", "x/a.lock", "x/y/LOCK.lock"}, []string{"a.lock/b", "alock"}},
		{"snapshots/*/meta", []string{"snapshots/1/meta"}, []string{"snapshots/meta", "snapshots/1/2/meta"}},
		{"a/**/z", []string{"a/z", "a/b/z", "a/b/c/z"}, []string{"a", "b/z", "a/z/y"}},
		{"LOCK", []string{"LOCK"}, []string{"x/LOCK", "LOCK/x"}},
	} {
		ps, err := compilePatterns([]string{tc.pattern})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range tc.yes {
			if !matchAny(ps, p) {
				t.Errorf("%q does not match %q", tc.pattern, p)
			}
		}
		for _, p := range tc.no {
			if matchAny(ps, p) {
				t.Errorf("%q matches %q", tc.pattern, p)
			}
		}
	}
}

func TestVersionDirNames(t *testing.T) {
	for name, want := range map[string]int64{"v0": 0, "v7": 7, "v123": 123} {
		if v, ok := parseVersionDirName(name); !ok || int64(v) != want {
			t.Errorf("%q = %d, %v", name, v, ok)
		}
	}
	for _, name := range []string{"v", "v07", "v-1", "v+1", "x1", "v1x", "V1", "v99999999999999999999"} {
		if v, ok := parseVersionDirName(name); ok {
			t.Errorf("%q accepted as %d", name, v)
		}
	}
}
