package main

// From an adversarial review of issue 13's default lease file: checkTempDir
// accepts any $TMPDIR we can write, sticky or not; in a world-writable
// $TMPDIR without the sticky bit (a shared volume mounted 0777, a
// misconfigured /tmp), another user can rename our private directory away
// and put a symlink in its place. The private directory's cleanup then lists
// the symlink's target and deletes every file in it: a delete outside
// anything nodeid-init owns (invariant 5).

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

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
	_, cleanA, err := claimDefaultLeaseFile(log) // the first run holds the stable file
	if err != nil {
		t.Fatal(err)
	}
	defer cleanA()
	path, cleanB, err := claimDefaultLeaseFile(log) // the second gets a private one
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
