package leasefile_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/clock"
	"github.com/nodeid/nodeid/leasefile"
)

func held(d time.Duration) leasefile.Lease {
	return leasefile.Lease{State: leasefile.StateHeld, NodeID: 1, Version: 4, TaskID: "t", BootID: leasefile.BootID(),
		ValidUntilBoottimeNs: int64(clock.SystemBoottime() + d)}
}

// A file a broker cannot parse (torn by a crash of an older writer, written
// by hand) is an error, never a valid lease: Check must say stop.
func TestCorruptFileIsNeverValid(t *testing.T) {
	for name, body := range map[string]string{
		"garbage":    "not json",
		"truncated":  `{"state":"held","nodeId":1,"version":4,"validUntilBoottimeNs":`,
		"empty":      "",
		"wrong type": `{"state":"held","nodeId":"one","version":4,"validUntilBoottimeNs":99999999999999999}`,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "lease.json")
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := leasefile.Read(path); err == nil || errors.Is(err, leasefile.ErrNoLease) {
				t.Fatalf("Read of %q: %v, want a parse error", body, err)
			} else if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the file", err)
			}
			if _, err := leasefile.Check(path); err == nil {
				t.Fatalf("Check of a corrupt file passed")
			}
		})
	}
}

// A held state with a deadline ahead is what makes a lease valid: released
// and lost files are not, whatever deadline they carry, and have nothing
// left.
func TestReleasedAndLostFilesAreNotValid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lease.json")
	for _, state := range []string{leasefile.StateReleased, leasefile.StateLost, "", "HELD"} {
		l := held(time.Hour)
		l.State = state
		if err := leasefile.Write(path, l); err != nil {
			t.Fatal(err)
		}
		got, err := leasefile.Check(path)
		if err == nil {
			t.Fatalf("state %q with a deadline an hour ahead is valid", state)
		}
		if got != l {
			t.Errorf("Check returned %+v, want the file's content %+v", got, l)
		}
		if want := "is " + state + " and not valid"; !strings.Contains(err.Error(), want) {
			t.Errorf("state %q: error %q does not say %q", state, err, want)
		}
		if r := got.Remaining(); r != 0 {
			t.Errorf("state %q: %v remaining, want 0", state, r)
		}
	}
	l := held(time.Hour)
	if err := leasefile.Write(path, l); err != nil {
		t.Fatal(err)
	}
	if _, err := leasefile.Check(path); err != nil {
		t.Fatalf("held with an hour left: %v", err)
	}
	// A deadline in the past: held but not valid, nothing remaining (not a
	// negative duration a caller could add to a timer).
	l.ValidUntilBoottimeNs = int64(clock.SystemBoottime() - time.Second)
	if l.Valid() || l.Remaining() != 0 {
		t.Fatalf("past deadline: valid %v, remaining %v", l.Valid(), l.Remaining())
	}
}

// Write is atomic: a failed write leaves the last good file in place and no
// temporary files behind, and reports the failure.
func TestWriteErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "lease.json")
	good := held(time.Hour)
	if err := leasefile.Write(path, good); err != nil {
		t.Fatal(err)
	}

	// The directory does not exist: CreateTemp fails.
	if err := leasefile.Write(filepath.Join(dir, "missing", "lease.json"), good); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
	// The target is a non-empty directory: the rename fails after the
	// temporary file was written; the temporary file is removed.
	target := filepath.Join(dir, "occupied")
	if err := os.MkdirAll(filepath.Join(target, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	bad := good
	bad.Version = 5
	if err := leasefile.Write(target, bad); err == nil || !strings.Contains(err.Error(), "lease file") {
		t.Fatalf("rename over a directory: %v, want a lease file error", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".lease-") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
	// The good file is untouched.
	if got, err := leasefile.Read(path); err != nil || got != good {
		t.Fatalf("after failed writes: %+v, %v; want %+v", got, err, good)
	}

	// An unreadable path that exists (a directory) is an error, not "no lease".
	if _, err := leasefile.Read(dir); err == nil || errors.Is(err, leasefile.ErrNoLease) {
		t.Fatalf("Read of a directory: %v", err)
	}
	if _, err := leasefile.Check(dir); err == nil {
		t.Fatal("Check of a directory passed")
	}
	// A missing file: ErrNoLease through Check too.
	if _, err := leasefile.Check(filepath.Join(dir, "none.json")); !errors.Is(err, leasefile.ErrNoLease) {
		t.Fatalf("Check of a missing file: %v, want ErrNoLease", err)
	}
}

// The file is written whole and readable by others (the broker may run as
// another user); replacing it keeps one file.
func TestWriteReplacesWholeFileReadableByAll(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "lease.json")
	for v := int64(1); v <= 3; v++ {
		l := held(time.Hour)
		l.Version = v
		if err := leasefile.Write(path, l); err != nil {
			t.Fatal(err)
		}
		got, err := leasefile.Read(path)
		if err != nil || got != l {
			t.Fatalf("write %d reads back as %+v, %v", v, got, err)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644 (CreateTemp makes 0600)", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("%d entries in the directory, want only the lease file", len(entries))
	}
}

// WriteFile replaces a file whole with the mode asked for (a hand-off is
// 0600, an env file 0644), leaving no temporary file, also when the rename
// fails.
func TestWriteFileReplacesWithTheMode(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		mode os.FileMode
	}{{"handoff.json", 0o600}, {"node.env", 0o644}} {
		path := filepath.Join(dir, c.name)
		for _, body := range []string{"first\n", "second\n"} {
			if err := leasefile.WriteFile(path, []byte(body), c.mode); err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(path); err != nil || string(b) != body {
				t.Fatalf("%s reads back as %q, %v; want %q", c.name, b, err, body)
			}
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != c.mode {
			t.Fatalf("%s: mode %v, %v; want %v", c.name, fi.Mode().Perm(), err, c.mode)
		}
	}
	target := filepath.Join(dir, "occupied")
	if err := os.MkdirAll(filepath.Join(target, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := leasefile.WriteFile(target, []byte("x"), 0o644); err == nil {
		t.Fatal("rename over a non-empty directory succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 {
		t.Errorf("%d entries in the directory, want the two files and the directory (no temporary file)", len(entries))
	}
}
