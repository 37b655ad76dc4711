package datadir

import (
	"errors"
	"io/fs"

	"github.com/nodeid/nodeid/nodeid"
)

// Newest returns the newest valid version directory of node id under root,
// and false if there is none. It reads only: an operator tool uses it to
// check that a version it is about to write is not below data that exists.
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
	return newestValidBelow(node, nodeid.Version(1<<62))
}
