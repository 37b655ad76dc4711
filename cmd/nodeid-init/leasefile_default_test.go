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
	a, cleanA, err := claimDefaultLeaseFile(log, "")
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
	b, cleanB, err := claimDefaultLeaseFile(log, "")
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
	c, cleanC, err := claimDefaultLeaseFile(log, "")
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
	p, clean, err := claimDefaultLeaseFile(slog.New(slog.NewTextHandler(io.Discard, nil)), "")
	if err != nil {
		t.Fatal(err)
	}
	defer clean()
	if p == defaultLeasePath() {
		t.Fatalf("used %s in a world-writable directory", p)
	}
}

// From an adversarial review of issue 13's default lease file: checkTempDir
// accepts any $TMPDIR we can write, sticky or not; in a world-writable
// $TMPDIR without the sticky bit (a shared volume mounted 0777, a
// misconfigured /tmp), another user can rename our private directory away
// and put a symlink in its place. The private directory's cleanup then lists
// the symlink's target and deletes every file in it: a delete outside
// anything nodeid-init owns (invariant 5).
func TestRevsPrivateLeaseDirCleanupFollowsASwappedInSymlink(t *testing.T) {
	tmp := t.TempDir()
	if err := os.Chmod(tmp, 0o777); err != nil { // world-writable, not sticky
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", tmp)
	if err := checkTempDir(); err != nil {
		t.Fatalf("checkTempDir refused %s: %v", tmp, err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	_, cleanA, err := claimDefaultLeaseFile(log, "") // the first run holds the stable file
	if err != nil {
		t.Fatal(err)
	}
	defer cleanA()
	path, cleanB, err := claimDefaultLeaseFile(log, "") // the second gets a private one
	if err != nil {
		t.Fatal(err)
	}
	private := filepath.Dir(path)
	if private == filepath.Dir(defaultLeasePath()) {
		t.Fatalf("second claim got the stable path")
	}

	// Someone else's files, e.g. another service's state.
	victim := t.TempDir()
	for _, f := range []string{"config", "keys"} {
		if err := os.WriteFile(filepath.Join(victim, f), []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The other user, allowed by the missing sticky bit: rename our
	// directory away and put a symlink in its place.
	if err := os.Rename(private, private+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, private); err != nil {
		t.Fatal(err)
	}
	cleanB()
	entries, _ := os.ReadDir(victim)
	if len(entries) != 2 {
		t.Fatalf("the private lease directory's cleanup deleted files of %s, reached through a symlink swapped in for %s: %d of 2 left",
			victim, private, len(entries))
	}
}
