package datadir

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodeid/nodeid/node"
)

// Cluster identifies a cluster by where its leases live. Prepare records it
// in OwnerName at the top of the root and refuses a root that names another
// cluster, and it names it in the in-progress file of every directory it
// prepares, so that only its own leftovers are ever removed.
type Cluster struct {
	Bucket string `json:"bucket"`
	Prefix string `json:"prefix"`
}

func (c Cluster) set() bool { return c.Bucket != "" }

func (c Cluster) String() string { return "s3://" + c.Bucket + "/" + c.Prefix }

// OwnerName is the file at the top of the data root that names its cluster.
const OwnerName = "nodeid-cluster.json"

// PreparingName is the in-progress file: Prepare creates it first in a new
// version directory and removes it after the marker. A directory without a
// valid marker is removed only if this file names the directory's version
// and our cluster; anything else may be someone's data. As Prepare's target
// it is redone only if the file also names Options.Tenure: otherwise it may
// be another holder of the version preparing it right now.
const PreparingName = ".nodeid-preparing"

// readOwner returns the cluster named by root's OwnerName; ok is false if
// there is none. A file that cannot be parsed names no cluster we could
// safely claim over, so it is ErrForeignCluster.
func readOwner(root *os.Root, rootPath string) (c Cluster, ok bool, err error) {
	dir, err := root.Open(".")
	if err != nil {
		return Cluster{}, false, fmt.Errorf("datadir: %w", err)
	}
	defer dir.Close()
	b, err := readSmallFileAt(dir, OwnerName)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Cluster{}, false, nil
	case errors.Is(err, errBadFile):
		return Cluster{}, false, fmt.Errorf("%w: %s names no cluster: %v", ErrForeignCluster, rootPath, err)
	case err != nil:
		return Cluster{}, false, fmt.Errorf("datadir: %w", err)
	}
	var w struct {
		Bucket *string `json:"bucket"`
		Prefix *string `json:"prefix"`
	}
	if err := decodeStrict(b, &w); err != nil || w.Bucket == nil || *w.Bucket == "" || w.Prefix == nil {
		return Cluster{}, false, fmt.Errorf("%w: %s names no cluster (want {\"bucket\":...,\"prefix\":...}): %q",
			ErrForeignCluster, filepath.Join(rootPath, OwnerName), b)
	}
	return Cluster{Bucket: *w.Bucket, Prefix: *w.Prefix}, true, nil
}

// CheckOwner reports, reading only, whether root may serve cluster c: it is
// ErrForeignCluster if OwnerName there names another cluster (or none that
// can be parsed), nil if it names c or is absent (Prepare claims the root
// then). Callers check it before taking a lease, so that a root of another
// cluster costs neither a lease nor a version.
func CheckOwner(root string, c Cluster) error {
	if !c.set() {
		return fmt.Errorf("%w: Cluster has no bucket", ErrInvalid)
	}
	rootDir, err := openRoot(root, false)
	if err != nil {
		return err
	}
	defer rootDir.Close()
	_, err = checkOwner(rootDir, root, c)
	return err
}

// checkOwner refuses a root owned by another cluster. claim reports that c
// is set and the root has no owner yet; nothing is written here.
func checkOwner(root *os.Root, rootPath string, c Cluster) (claim bool, err error) {
	if !c.set() {
		return false, nil
	}
	owner, ok, err := readOwner(root, rootPath)
	if err != nil || !ok {
		return err == nil, err
	}
	if owner != c {
		return false, fmt.Errorf("%w: %s belongs to %s (%s), not %s", ErrForeignCluster, rootPath, owner, OwnerName, c)
	}
	return false, nil
}

// claimOwner writes OwnerName and reports whether this call wrote it. The
// content is written to a temporary file first and linked into place, so
// the file appears complete or not at all, and two clusters claiming at once
// cannot both win.
func claimOwner(root *os.Root, rootPath string, c Cluster, log *slog.Logger) (bool, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return false, err
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := "." + OwnerName + "." + hex.EncodeToString(rnd[:])
	dir, err := root.Open(".")
	if err != nil {
		return false, fmt.Errorf("datadir: %w", err)
	}
	defer dir.Close()
	if err := createFile(dir, tmp, b); err != nil {
		return false, fmt.Errorf("datadir: writing %s: %w", filepath.Join(rootPath, tmp), err)
	}
	defer root.Remove(tmp)
	switch err := root.Link(tmp, OwnerName); {
	case errors.Is(err, fs.ErrExist):
		// Claimed meanwhile: by our cluster (fine, not by us) or by
		// another (refused).
		_, err := checkOwner(root, rootPath, c)
		return false, err
	case err != nil:
		return false, fmt.Errorf("datadir: %w", err)
	}
	if err := syncFile(dir); err != nil {
		return false, fmt.Errorf("datadir: %w", err)
	}
	log.Info("data root claimed for this cluster", "root", rootPath, "cluster", c.String(),
		"adopted", hasNodeDirs(root))
	return true, nil
}

// hasNodeDirs reports whether the root already held node directories when it
// was claimed: written before ownership was recorded, or by Camunda.
func hasNodeDirs(root *os.Root) bool {
	entries, _ := fs.ReadDir(root.FS(), ".")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "node-") {
			return true
		}
	}
	return false
}

type inProgress struct {
	Version node.Version `json:"version"`
	Bucket  string       `json:"bucket"`
	Prefix  string       `json:"prefix"`
	Tenure  string       `json:"tenure"` // absent in files of earlier releases: ""
}

// writeInProgress marks the version directory dir as ours and unfinished,
// prepared by tenure ("" for GC's removals: no tenure may redo those).
// With replace, an existing in-progress file is unlinked first, never
// written through.
func writeInProgress(dir *os.File, v node.Version, c Cluster, tenure string, replace bool) error {
	b, err := json.Marshal(inProgress{Version: v, Bucket: c.Bucket, Prefix: c.Prefix, Tenure: tenure})
	if err != nil {
		return err
	}
	if replace {
		return replaceFile(dir, PreparingName, b)
	}
	return createFile(dir, PreparingName, b)
}

// onlyInProgress reports whether the in-progress file is the only entry of
// dir and holds nothing (a crash between its creation and its write) or
// names cluster c (for any version). Such a directory holds no data: no
// copy starts before the in-progress file is written and fsynced. lone is
// the file, for the removal to check that it is still the one judged.
func onlyInProgress(dir *os.File, c Cluster) (lone unix.Stat_t, ok bool, err error) {
	d, err := openDirAt(dir, ".")
	if err != nil {
		return lone, false, fmt.Errorf("datadir: %w", err)
	}
	names, err := d.Readdirnames(2)
	d.Close()
	if err != nil && err != io.EOF {
		return lone, false, fmt.Errorf("datadir: %w", err)
	}
	if len(names) != 1 || names[0] != PreparingName {
		return lone, false, nil
	}
	switch err := fstatat(int(dir.Fd()), PreparingName, &lone); {
	case errors.Is(err, fs.ErrNotExist):
		return lone, false, nil
	case err != nil:
		return lone, false, fmt.Errorf("datadir: %w", err)
	}
	if lone.Mode&unix.S_IFMT != unix.S_IFREG {
		return lone, false, nil
	}
	if lone.Size == 0 {
		return lone, true, nil
	}
	b, err := readSmallFileAt(dir, PreparingName)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, errBadFile):
		return lone, false, nil
	case err != nil:
		return lone, false, fmt.Errorf("datadir: %w", err)
	}
	ip, ok := parseInProgress(b)
	return lone, ok && ip.Bucket == c.Bucket && ip.Prefix == c.Prefix && int64(len(b)) == lone.Size, nil
}

// parseInProgress parses an in-progress file; ok is false unless version,
// bucket and prefix are present. A missing tenure (earlier releases) is "".
func parseInProgress(b []byte) (ip inProgress, ok bool) {
	var w struct {
		Version *node.Version `json:"version"`
		Bucket  *string       `json:"bucket"`
		Prefix  *string       `json:"prefix"`
		Tenure  string        `json:"tenure"`
	}
	if decodeStrict(b, &w) != nil || w.Version == nil || w.Bucket == nil || w.Prefix == nil {
		return inProgress{}, false
	}
	return inProgress{Version: *w.Version, Bucket: *w.Bucket, Prefix: *w.Prefix, Tenure: w.Tenure}, true
}

// ownLeftover reports whether dir holds an in-progress file naming version v
// and cluster c, and the tenure it names. Only an I/O error is an error: a
// missing or unreadable file just does not prove anything.
func ownLeftover(dir *os.File, v node.Version, c Cluster) (ours bool, tenure string, err error) {
	return ownLeftoverAt(dir, PreparingName, v, c)
}

// ownLeftoverAt is ownLeftover for the in-progress file under the name
// file (claimName: a removal claimed it).
func ownLeftoverAt(dir *os.File, file string, v node.Version, c Cluster) (ours bool, tenure string, err error) {
	b, err := readSmallFileAt(dir, file)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, errBadFile):
		return false, "", nil
	case err != nil:
		return false, "", fmt.Errorf("datadir: %w", err)
	}
	ip, ok := parseInProgress(b)
	if !ok || ip.Version != v || ip.Bucket != c.Bucket || ip.Prefix != c.Prefix {
		return false, "", nil
	}
	return true, ip.Tenure, nil
}
