package datadir

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

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

// Review (rev-datadir), invariant 3 through a hard link: the SettleTime
// guard trusts that "a write through any descriptor moves the mtime". A
// write through a shared mapping moves it only at the first write fault
// on a clean page; later stores to that page move nothing (tmpfs: never,
// it has no writeback; ext4/NFS: until the page is written back).
//
// Schedule: the stale holder of v4 maps snapshots/1/000042.sst (one name)
// and stores into it at T0 (mtime and ctime = T0). It keeps writing it:
// at T0+3*settle it stores again (no fault, mtime stays T0). Its lease is
// lost; the successor prepares v5 right away (ungraceful, zeebe preset,
// SettleTime = settle). The file was written less than SettleTime ago, so
// the guard must copy it; its stamp says T0, so it is linked. After the
// takeover the stale holder stores once more: that write lands in the
// successor's v5.
func TestSnapshotFileWrittenThroughMmapWithinSettleTimeIsCopied(t *testing.T) {
	const settle = 300 * time.Millisecond
	_, root := smallTmpfsRoot(t)
	rel := "snapshots/1/000042.sst"
	src := makeVersion(t, root, 0, 4, map[string]string{rel: string(bytes.Repeat([]byte{'.'}, 4096))}, 4)
	m := mapShared(t, filepath.Join(src, rel), 4096)
	m[0] = 'A' // the stale holder writes (first fault: mtime moves)
	time.Sleep(3 * settle)
	m[1] = 'B' // still writing it, just now (mtime does not move)

	dir, res := mustPrepare(t, root, inst(0, 5), Options{Rules: zeebe(t), SettleTime: settle, Logger: quiet})
	m[2] = 'C' // the stale holder's write after the takeover

	b, err := os.ReadFile(filepath.Join(dir, rel))
	if err != nil {
		t.Fatal(err)
	}
	if sameInode(t, src, dir, rel) || b[2] == 'C' {
		t.Errorf("%s, written by the stale holder within SettleTime (through mmap), was hard-linked into v5 (files_linked=%d): "+
			"the successor's copy now holds the stale holder's later write (%q)", rel, res.FilesLinked, b[:3])
	}
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
// (ErrValidation, no marker); it succeeds.
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
