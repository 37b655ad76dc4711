package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// The default lease file is stable ($TMPDIR/nodeid-<uid>/lease.json, so
// that health finds it), in a directory only we can write; a second run
// gets a private directory of its own, removed by its cleanup.
func TestDefaultLeaseFileIsStableAndPrivate(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a, cleanA, err := claimDefaultLeaseFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if a != defaultLeasePath() || filepath.Dir(filepath.Dir(a)) != tmp {
		t.Fatalf("first lease file %s, want %s", a, defaultLeasePath())
	}
	fi, err := os.Lstat(filepath.Dir(a))
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
		t.Fatalf("directory %v %v, want a 0755 directory", fi, err)
	}
	b, cleanB, err := claimDefaultLeaseFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if b == a || filepath.Dir(filepath.Dir(b)) != tmp {
		t.Fatalf("second lease file %s while %s is in use", b, a)
	}
	if err := os.WriteFile(b, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	cleanB()
	if _, err := os.Stat(filepath.Dir(b)); !os.IsNotExist(err) {
		t.Errorf("private directory %s left behind: %v", filepath.Dir(b), err)
	}
	cleanA()
	// Released: the next run takes the stable path again.
	c, cleanC, err := claimDefaultLeaseFile(log)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanC()
	if c != a {
		t.Fatalf("after the first exited: %s, want %s", c, a)
	}
}

// A directory someone else could write is never used.
func TestDefaultLeaseFileRefusesAnOpenDirectory(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	if err := os.Mkdir(filepath.Dir(defaultLeasePath()), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(defaultLeasePath()), 0o777); err != nil {
		t.Fatal(err)
	}
	p, clean, err := claimDefaultLeaseFile(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer clean()
	if p == defaultLeasePath() {
		t.Fatalf("used %s in a world-writable directory", p)
	}
}
