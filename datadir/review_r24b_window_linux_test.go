package datadir

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeid/nodeid/nodeid"
)

// Review r24b, invariant 3, with this tree's own preparer. removeGarbage
// looks for MarkerName (and renames it aside if found), then removes the
// name aside: a stale preparer paused between its recheck (passed before
// the claim) and its publishMarker that links in between those two system
// calls leaves MarkerName in the garbage directory, listed with our own
// files and so removed last. A mount met while emptying then renames the
// directory back to v2 with that marker valid over what is left.
//
// Schedule per trial (node i; A holds v2, B v3):
//  1. A copied v1 into v2, validated, flushed, wrote its marker aside and
//     passed its recheck; its lease is lost (paused before publishMarker).
//  2. B prepares v3: claims v2, renames it to its garbage name, looks for
//     a marker (none), ...
//  3. ... A's publishMarker links the marker (A is then SIGKILLed, before
//     its unlink of the in-progress file could fail and unmark) ...
//  4. ... B removes the name aside, lists, and meets a mount that arrived
//     on z while it removed d0..d3: it renames the directory back to v2.
//
// The race is run until A's link lands in the window (or the trials run
// out); the mount is made only in trials where it did.
func TestReviewR24bLateLinkBetweenMarkerLookAndAsideUnlink(t *testing.T) {
	mnt, _ := bigTmpfsRoot(t)
	root := filepath.Join(mnt, "root")
	c := Cluster{Bucket: "b", Prefix: "p/"}
	writeFiles(t, root, map[string]string{OwnerName: `{"bucket":"b","prefix":"p/"}`})
	files := map[string]string{}
	for d := range 4 {
		for f := range 5 {
			files[fmt.Sprintf("d%d/f%03d", d, f)] = "data"
		}
	}
	one := nodeid.Version(1)
	deadline := time.Now().Add(60 * time.Second)
	hits := 0
	for trial := 0; time.Now().Before(deadline) && trial < 20000; trial++ {
		id := trial
		makeVersion(t, root, id, 1, files, 1)
		v2 := Dir(root, inst(id, 2))
		if err := os.MkdirAll(filepath.Join(v2, "z"), 0o750); err != nil {
			t.Fatal(err)
		}
		writeFiles(t, v2, files)
		d2, err := os.Open(v2)
		if err != nil {
			t.Fatal(err)
		}
		if err := writeInProgress(d2, 2, c, "task-A", false); err != nil {
			t.Fatal(err)
		}
		if err := writeMarkerAside(d2, Marker{InitializedAt: time.Now(), Version: 2, InitializedFrom: &one}); err != nil {
			t.Fatal(err)
		}
		delay := rand.IntN(400)
		aDone := make(chan error, 1)
		go func() {
			fd := int(d2.Fd())
			var st unix.Stat_t
			until := time.Now().Add(2 * time.Second)
			for fstatat(fd, claimName, &st) != nil {
				if time.Now().After(until) {
					aDone <- errors.New("no claim")
					return
				}
			}
			for {
				if _, err := os.Lstat(v2); errors.Is(err, os.ErrNotExist) {
					break
				}
				if time.Now().After(until) {
					aDone <- errors.New("no rename")
					return
				}
			}
			for i := 0; i < delay; i++ {
				_ = fstatat(fd, ".", &st)
			}
			aDone <- publishMarker(d2) // then SIGKILLed
		}()
		mounted := ""
		nodePath := filepath.Dir(v2)
		testHookGarbageListed = func(name string) {
			if mounted != "" {
				return
			}
			var st unix.Stat_t
			if fstatat(int(d2.Fd()), MarkerName, &st) != nil {
				return
			}
			p := filepath.Join(nodePath, name, "z")
			if err := unix.Mount("tmpfs", p, "tmpfs", 0, "size=1m"); err == nil {
				mounted = p
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		testHookFile = func(string) { cancel() }
		_, _, _ = Prepare(ctx, root, inst(id, 3), Options{Cluster: c, Tenure: "task-B", Logger: quiet, Workers: 1})
		cancel()
		testHookFile, testHookGarbageListed = nil, nil
		aErr := <-aDone
		d2.Close()
		if trial < 3 {
			t.Logf("trial %d: A: %v", trial, aErr)
		}
		if mounted == "" {
			continue
		}
		// Where it is: under the garbage name, or v2's if renamed back.
		if unix.Unmount(mounted, unix.MNT_DETACH) != nil {
			unix.Unmount(filepath.Join(v2, "z"), unix.MNT_DETACH)
		}
		hits++
		d, err := os.Open(v2)
		if err != nil {
			t.Logf("trial %d: A linked in the window (%v) but v2 is gone: %v", trial, aErr, err)
			continue
		}
		_, merr := readMarker(d, 2)
		names, _ := d.Readdirnames(-1)
		d.Close()
		if merr != nil {
			continue
		}
		t.Errorf("trial %d (delay %d): v2 is back in the versions with a valid marker over %s", trial, delay, strings.Join(names, " "))
		dir, res, err := Prepare(context.Background(), root, inst(id, 4), Options{Cluster: c, Tenure: "task-C", Logger: quiet})
		_, v1Err := os.Stat(Dir(root, inst(id, 1)))
		t.Errorf("C: v4 %s built from v%d (%v); v1: %v", dir, res.Source, err, v1Err)
		return
	}
	t.Logf("%d trials hit the window without a break", hits)
}
