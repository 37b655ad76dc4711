//go:build unix

package datadir

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/nodeid/nodeid/node"
)

// A version directory whose removal started is first renamed out of the
// version namespace, to its garbage name, and only then emptied: a stale
// preparer still holding it open (its lease lost, paused) can still put
// its marker into it through its descriptor (linkat), but never into a
// directory anyone judges a version. See docs/datadir.md, Garbage
// collection.

// claimName is the in-progress file of a leftover whose removal was
// claimed: renamed from PreparingName, so the preparer's own unlink of
// PreparingName fails (exactly one of the two succeeds), and still naming
// the version and the cluster, so the directory stays positively ours.
const claimName = ".nodeid-preparing.nodeid-removing"

const garbageSuffix = ".nodeid-removing"

// garbageName is the name of the directory of version v, inode ino, once
// its removal started. Not a version to this package (not canonical), nor
// to Camunda's provider (which reads names starting with "v"); the inode
// keeps two garbage directories of one version apart.
func garbageName(v node.Version, ino uint64) string {
	return "." + versionDirName(v) + "." + strconv.FormatUint(ino, 10) + garbageSuffix
}

// altGarbageName is garbageName with a random tag, for when that name is
// taken (planted): .vJ.<inode>-<random>.nodeid-removing.
func altGarbageName(v node.Version, ino uint64) string {
	return "." + versionDirName(v) + "." + strconv.FormatUint(ino, 10) + "-" + strconv.FormatUint(rand.Uint64(), 10) + garbageSuffix
}

// garbageNameTries bounds the names moveToGarbage tries.
const garbageNameTries = 4

// parseGarbageName returns the version of a garbage name.
func parseGarbageName(name string) (node.Version, bool) {
	rest, ok := strings.CutPrefix(name, ".")
	if !ok {
		return 0, false
	}
	if rest, ok = strings.CutSuffix(rest, garbageSuffix); !ok {
		return 0, false
	}
	vname, ino, ok := strings.Cut(rest, ".")
	ino, tag, tagged := strings.Cut(ino, "-")
	if !ok || !isDecimal(ino) || tagged && !isDecimal(tag) {
		return 0, false
	}
	return parseVersionDirName(vname)
}

func isDecimal(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// ownFileNames are the files of ours a version directory can hold at its
// top; removeGarbage removes the ones that make a garbage directory
// recognisably ours last.
var ownFileNames = []string{MarkerName, markerAsideName, removingName, PreparingName, claimName}

// errGarbageLeft: the directory left the version namespace, but what is
// left of it could not be removed now; the next garbage collection does.
var errGarbageLeft = errors.New("moved out of the versions, not removed yet")

// sameAt fails unless name in parent is still the directory d.
func sameAt(parent *os.File, name string, d *os.File) (unix.Stat_t, error) {
	var st, want unix.Stat_t
	if err := fstatat(int(parent.Fd()), name, &st); err != nil {
		return want, err
	}
	if err := unix.Fstat(int(d.Fd()), &want); err != nil {
		return want, &os.PathError{Op: "fstat", Path: d.Name(), Err: err}
	}
	if st.Dev != want.Dev || st.Ino != want.Ino {
		return want, fmt.Errorf("%s was replaced since it was inspected; left in place", path.Join(parent.Name(), name))
	}
	return want, nil
}

// renameNoReplace renames old to new in dir, failing with EEXIST if new
// exists: renameat2 RENAME_NOREPLACE, or where the file system lacks it
// (NFS) a check, then renameat (which could then only replace an empty
// directory planted under our garbage name in between).
func renameNoReplace(dir *os.File, old, new string) error {
	fd := int(dir.Fd())
	err := unix.Renameat2(fd, old, fd, new, unix.RENAME_NOREPLACE)
	if err == unix.EINVAL || err == unix.ENOSYS {
		var st unix.Stat_t
		switch serr := fstatat(fd, new, &st); {
		case serr == nil:
			err = unix.EEXIST
		case !errors.Is(serr, fs.ErrNotExist):
			return serr
		default:
			err = unix.Renameat(fd, old, fd, new)
		}
	}
	if err != nil {
		return &os.LinkError{Op: "renameat", Old: path.Join(dir.Name(), old), New: path.Join(dir.Name(), new), Err: err}
	}
	return nil
}

// moveToGarbage renames e's directory (still e.dir) to its garbage name,
// durably (the node directory is fsynced): from then on no marker in it
// is one of a version. A rename needs no free space. e.name becomes the
// garbage name.
func moveToGarbage(node *os.File, e *entry) error {
	want, err := sameAt(node, e.name, e.dir)
	if err != nil {
		return err
	}
	// A name taken (planted by whoever can write node-N) is not ours
	// to replace; another, unguessable, is tried.
	g := garbageName(e.v, want.Ino)
	for i := 1; ; i++ {
		err = renameNoReplace(node, e.name, g)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EEXIST) || i == garbageNameTries {
			return err
		}
		g = altGarbageName(e.v, want.Ino)
	}
	// Swapped between the check and the rename: what was renamed is not
	// what was judged, and nothing of it is removed.
	if _, err := sameAt(node, g, e.dir); err != nil {
		return err
	}
	e.name = g
	return syncFile(node)
}

// keeperNames are our files that make a garbage directory ours by their
// content (judgeGarbage): removeGarbage removes them only once nothing
// else is left, so that a stale preparer's late writes never land in a
// directory that holds nothing of ours any more.
var keeperNames = []string{claimName, PreparingName, removingName}

// removeGarbage empties the garbage directory name of node, open as d, and
// removes it. First the marker's name aside goes, so that no linkat
// (publishMarker) of a stale preparer can put a marker in place any more;
// only then the marker, durably, renamed to removingName (a copy from it,
// begun while it was a valid version, fails its sourceStillValid check),
// and again after the listing; then everything but the files that make it
// ours by content (keeperNames); those only when nothing else is left.
// Why no window remains: see docs/datadir.md, Garbage collection. A stale
// preparer may still write into it through its descriptor meanwhile: it
// is emptied again, at most three times, and what is left, still holding
// a keeper, the next garbage collection removes. Should the rmdir fail
// (a late write between the keepers' unlink and it, or any other error),
// the first keeper is written back (the directory is ours: we renamed it
// out of the versions, or judged it ours).
func removeGarbage(node *nodeDir, name string, d *os.File, steps *atomic.Int64) error {
	if err := checkVersionNotMount(node.f, d); err != nil {
		return err
	}
	if err := makeWritable(d); err != nil {
		return err
	}
	// Before each round and each directory level emptied: the garbage
	// name must still lead to d, and node-N's name in the data root to
	// node (its descriptor follows node-N when it is moved). A tenant who
	// moved either out of the data root has it left there, nothing more
	// listed, chmodded or removed.
	want, err := idOf(d)
	if err != nil {
		return err
	}
	guard := func() error {
		var st unix.Stat_t
		err := fstatat(int(node.f.Fd()), name, &st)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return err
		case (dirID{uint64(st.Dev), uint64(st.Ino)}) == want:
			switch moved, err := node.moved(); {
			case err != nil:
				return err
			case !moved:
				return nil
			}
			return fmt.Errorf("%s (holding %s): %w", node.f.Name(), name, errMovedOut)
		}
		return fmt.Errorf("%s: %w", path.Join(node.f.Name(), name), errMovedOut)
	}
	removeAll := func(n string) error { return removeAllAtGuarded(d, n, steps, guard) }
	var last error
	for range 3 {
		if err := guard(); err != nil {
			return err
		}
		// removeAllAt: whatever is there (a directory planted under the
		// name is as much the version's content as any other).
		if err := removeAll(markerAsideName); err != nil {
			return err
		}
		if err := unpublishMarker(d, steps); err != nil {
			return err
		}
		names, err := readDirNames(d)
		if err != nil {
			return err
		}
		if testHookGarbageListed != nil {
			testHookGarbageListed(name)
		}
		// A marker linked since the look by a writer that takes no heed
		// of the claim (an earlier release's preparer).
		if err := unpublishMarker(d, steps); err != nil {
			return err
		}
		// Our other files last: a crash halfway leaves it recognisably
		// ours.
		slices.SortStableFunc(names, func(a, b string) int {
			return boolInt(slices.Contains(ownFileNames, a)) - boolInt(slices.Contains(ownFileNames, b))
		})
		for _, n := range names {
			if slices.Contains(keeperNames, n) {
				continue
			}
			if err := removeAll(n); err != nil {
				return err
			}
		}
		// And before our own files go and the directory itself.
		if err := guard(); err != nil {
			return err
		}
		k, err := removeKeepersIfAlone(d, steps)
		if err != nil {
			return err
		}
		if k == nil {
			last = &os.PathError{Op: "rmdir", Path: path.Join(node.f.Name(), name), Err: unix.ENOTEMPTY}
			continue
		}
		last = rmdirAt(node.f, name, d)
		if last == nil {
			return nil
		}
		// The name no longer leads to d (moved or replaced since): d may
		// lie outside the data root now, so nothing is written through it.
		if pe := (*os.PathError)(nil); !errors.As(last, &pe) || pe.Op != "rmdir" {
			return last
		}
		// Whatever stopped the rmdir itself (late entries, or node-N made
		// read-only: EACCES), the claim goes back, or no later garbage
		// collection would judge the directory ours.
		if err := restoreKeeper(d, k); err != nil {
			return errors.Join(last, err)
		}
		if !errors.Is(last, unix.ENOTEMPTY) && !errors.Is(last, unix.EEXIST) {
			return last
		}
	}
	return last
}

// keeper is a keeper file removeGarbage unlinked, kept to be written back.
type keeper struct {
	name string
	b    []byte
}

// removeKeepersIfAlone removes the keepers of d if nothing else is left in
// it, and returns the first (to write back should the rmdir fail); nil,
// with nothing removed, if something else is left.
func removeKeepersIfAlone(d *os.File, steps *atomic.Int64) (*keeper, error) {
	names, err := readDirNames(d)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		if !slices.Contains(keeperNames, n) {
			return nil, nil
		}
	}
	k := &keeper{}
	for _, n := range keeperNames {
		if !slices.Contains(names, n) {
			continue
		}
		if k.name == "" {
			// What judgeGarbage accepted is a small regular file; anything
			// else under the name is not written back.
			if b, err := readSmallFileAt(d, n); err == nil {
				k.name, k.b = n, b
			}
			// Back as the claim, never as PreparingName: a stale
			// preparer's unlink of that must keep failing.
			if k.name == PreparingName {
				k.name = claimName
			}
		}
		if err := removeAllAt(d, n, steps); err != nil {
			return nil, err
		}
	}
	if testHookKeepersRemoved != nil {
		testHookKeepersRemoved()
	}
	return k, nil
}

// restoreKeeper writes k back into d, durably (createFile): late entries
// appeared after its unlink, and without it no later garbage collection
// would judge the directory ours.
func restoreKeeper(d *os.File, k *keeper) error {
	if k.name == "" {
		return nil
	}
	return createFile(d, k.name, k.b)
}

// testHookKeepersRemoved runs after removeGarbage removed the keepers,
// before its rmdir.
var testHookKeepersRemoved func()

// unpublishMarker renames the marker of the garbage directory d, if any,
// to removingName, durably. Something planted there that a rename of a
// file cannot replace (a directory) is content of the version like any
// other: it is removed, and the rename made again.
func unpublishMarker(d *os.File, steps *atomic.Int64) error {
	fd := int(d.Fd())
	var st unix.Stat_t
	if fstatat(fd, MarkerName, &st) != nil {
		return nil
	}
	err := unix.Renameat(fd, MarkerName, fd, removingName)
	if err == unix.EISDIR || err == unix.ENOTEMPTY || err == unix.EEXIST {
		if rerr := removeAllAt(d, removingName, steps); rerr != nil {
			return rerr
		}
		err = unix.Renameat(fd, MarkerName, fd, removingName)
	}
	if err != nil && err != unix.ENOENT {
		return &os.LinkError{Op: "renameat", Old: path.Join(d.Name(), MarkerName), New: path.Join(d.Name(), removingName), Err: err}
	}
	return syncFile(d)
}

// testHookGarbageListed runs after removeGarbage listed what it removes.
var testHookGarbageListed func(name string)

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// judgeGarbage opens the garbage directory name (of version v) of node and
// says whether it is what a removal of ours renamed, judged as the
// original was: it still holds our claimed or unclaimed in-progress file
// naming v and c, a marker of v (a valid version, or one being removed),
// or nothing but our own files, each what it is named (a stale preparer's
// late marker after the rest was removed). d is nil if it is not ours or
// gone.
func judgeGarbage(node *os.File, name string, v node.Version, c Cluster, steps *atomic.Int64) (d *os.File, why string, err error) {
	step(steps) // judged like a version directory (inspect)
	d, err = openDirAt(node, name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, "", nil
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		return nil, "not a directory", nil
	case err != nil:
		return nil, "", fmt.Errorf("datadir: %w", err)
	}
	ours, err := garbageIsOurs(d, v, c)
	if err != nil || !ours {
		d.Close()
		return nil, "no marker, in-progress file or claim of this version and cluster", err
	}
	return d, "", nil
}

func garbageIsOurs(d *os.File, v node.Version, c Cluster) (bool, error) {
	for _, n := range []string{claimName, PreparingName} {
		if ours, _, err := ownLeftoverAt(d, n, v, c); err != nil || ours {
			return ours, err
		}
	}
	for _, n := range []string{MarkerName, removingName} {
		if ours, err := ownMarkerAt(d, n, v); err != nil || ours {
			return ours, err
		}
	}
	names, err := readDirNames(d)
	if err != nil {
		return false, err
	}
	// Nothing else: every file is one of ours by its content, not its
	// name alone (a tenant's file can have any name). The in-progress
	// and marker names were judged above; what is left to accept is the
	// marker's name aside holding a marker of v.
	for _, n := range names {
		if n != markerAsideName {
			return false, nil
		}
		if ours, err := ownMarkerAt(d, n, v); err != nil || !ours {
			return false, err
		}
	}
	return true, nil
}

// ownMarkerAt reports whether file in d is a marker of v (a small regular
// file: see readSmallFileAt). Only an I/O error is an error.
func ownMarkerAt(d *os.File, file string, v node.Version) (bool, error) {
	switch _, err := readMarkerAt(d, file, v); {
	case err == nil:
		return true, nil
	case errors.Is(err, errNoMarker), errors.Is(err, errBadMarker):
		return false, nil
	default:
		return false, err
	}
}

// collectGarbage finishes the removals of versions below k that a crash, or
// a stale preparer's late write, left in garbage directories; skip are the
// ones this run just left at a mount point (reported already).
func collectGarbage(node *nodeDir, nodePath string, k node.Version, c Cluster, skip []string, steps *atomic.Int64) (removed, notOurs, mounts []string, errs []error) {
	names, err := readDirNames(node.f)
	if err != nil {
		return nil, nil, nil, []error{fmt.Errorf("datadir: listing %s: %w", nodePath, err)}
	}
	slices.Sort(names)
	for _, n := range names {
		v, ok := parseGarbageName(n)
		if !ok || v >= k || slices.Contains(skip, n) {
			continue
		}
		p := path.Join(nodePath, n)
		d, why, err := judgeGarbage(node.f, n, v, c, steps)
		switch {
		case err != nil:
			errs = append(errs, err)
			continue
		case d == nil && why != "":
			notOurs = append(notOurs, p)
			continue
		case d == nil:
			continue
		}
		err = removeGarbage(node, n, d, steps)
		d.Close()
		switch {
		case errors.Is(err, errMovedOut):
			notOurs = append(notOurs, p)
		case errors.Is(err, errMountPoint):
			notOurs, mounts = append(notOurs, p), append(mounts, p)
		case err != nil:
			errs = append(errs, fmt.Errorf("datadir: removing %s: %w", n, err))
		default:
			removed = append(removed, p)
		}
	}
	return removed, notOurs, mounts, errs
}
