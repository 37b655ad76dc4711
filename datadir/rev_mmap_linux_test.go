package datadir

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// mapShared maps the first n bytes of file read-write, shared, as a stale
// broker maps its journal segments (Zeebe writes them through mmap).
func mapShared(t *testing.T, file string, n int) []byte {
	t.Helper()
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(m) })
	return m
}

// Review (rev-datadir), invariant 3 (never built from an incomplete
// version): validation proves a copied source unchanged since it was
// opened by its stamp (size, mtime, ctime). Stores through a shared
// mapping to pages already dirty move none of them, so a copy torn across
// two files passes.
//
// Schedule: the stale holder of v4 has log/a and log/b mapped, and has
// written both (their pages are dirty). Its lease is lost; the successor
// prepares v5 (ungraceful, copy mode, one worker). After the first of the
// two files is copied, the stale holder writes a record into that file and
// then its commit into the other (the order a journal writes data, then
// the index that points at it). The second file is copied with the commit,
// the first without the record: v5 holds a commit pointing at data it does
// not have, a state the source never was in. Prepare must fail
// (ErrValidation, no marker); it succeeded while validation compared
// stamps only. After an ungraceful takeover it compares the bytes too.
func TestCopyTornByMmapWritesDuringTheCopyFailsValidation(t *testing.T) {
	_, root := smallTmpfsRoot(t)
	page := string(bytes.Repeat([]byte{'.'}, 4096))
	src := makeVersion(t, root, 0, 4, map[string]string{"log/a": page, "log/b": page}, 4)
	maps := map[string][]byte{
		"log/a": mapShared(t, filepath.Join(src, "log/a"), 4096),
		"log/b": mapShared(t, filepath.Join(src, "log/b"), 4096),
	}
	for _, m := range maps {
		m[0] = 'w' // written before the takeover: the pages are dirty
	}
	var first string
	setHook(t, &testHookFile, func(rel string) {
		if first == "" {
			first = rel
			return
		}
		maps[first][1] = 'R' // the record, in the file already copied
		maps[rel][1] = 'C'   // then its commit, in the file about to be copied
	})
	dir, _, err := Prepare(context.Background(), root, inst(0, 5), Options{Workers: 1, Logger: quiet})
	if err == nil {
		a, _ := os.ReadFile(filepath.Join(dir, first))
		other := map[string]string{"log/a": "log/b", "log/b": "log/a"}[first]
		b, _ := os.ReadFile(filepath.Join(dir, other))
		t.Errorf("Prepare succeeded over a copy torn by the stale holder's mmap writes: v5/%s = %q... (record missing), v5/%s = %q... (its commit present); want ErrValidation",
			first, a[:2], other, b[:2])
	}
}
