package datadir

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/nodeid/nodeid/nodeid"
)

// Newest returns the newest valid version directory of node id under root,
// and false if there is none. It reads only: an operator tool uses it to
// check that a version it is about to write is not below data that exists.
// Like Prepare, it refuses (ErrUnrecognized) when an entry above the newest
// valid version cannot be judged: an unreadable marker, or a symlink or file
// named like a version.
func Newest(root string, id int) (nodeid.Version, bool, error) {
	if id < 0 {
		return 0, false, ErrInvalid
	}
	rootDir, err := openRoot(root)
	if err != nil {
		return 0, false, err
	}
	defer rootDir.Close()
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
		e, err := inspect(node.f, versionDirName(v), v, Cluster{})
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
