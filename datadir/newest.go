package datadir

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/nodeid/nodeid/node"
)

// Newest returns the newest valid version directory of node id under root,
// and false if there is none. It reads only (a read-only root will do): an
// operator tool uses it to check that a version it is about to write is not
// below data that exists. It judges as Prepare of cluster c does: a root
// owned by another cluster is ErrForeignCluster, c's own leftovers are
// passed over, and an entry above the newest valid version that cannot be
// judged (an unreadable marker that is not c's leftover, a symlink or file
// named like a version) is ErrUnrecognized.
func Newest(root string, id int, c Cluster) (node.Version, bool, error) {
	if id < 0 {
		return 0, false, ErrInvalid
	}
	if !c.set() && c.Prefix != "" {
		return 0, false, fmt.Errorf("%w: Cluster has a prefix but no bucket", ErrInvalid)
	}
	rootDir, err := openRoot(root, false)
	if err != nil {
		return 0, false, err
	}
	defer rootDir.Close()
	if _, err := checkOwner(rootDir, root, c); err != nil {
		return 0, false, err
	}
	node, err := openNodeDir(rootDir, nodeDirName(id), 0, false)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	defer node.Close()
	vs, err := versionDirs(node.f)
	if err != nil {
		return 0, false, err
	}
	for _, v := range vs {
		e, err := inspect(node.f, versionDirName(v), v, c, nil)
		e.close()
		switch {
		case err != nil:
			return 0, false, err
		case e.st == stateValid:
			return v, true, nil
		case e.st == stateBadMarker, e.st == stateNotDir:
			// Perhaps a newer version in another format, or moved and
			// symlinked: do not guess below it.
			return 0, false, fmt.Errorf("%w: %s: %s", ErrUnrecognized, versionDirName(v), e.why)
		}
	}
	return 0, false, nil
}
