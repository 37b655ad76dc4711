//go:build unix

package datadir

import (
	"fmt"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// maxHeld bounds the target directories held open for the later names of
// copied multi-name files (tree.held): one per directory would exhaust
// descriptors on a large tree. Beyond it, a directory is opened again
// (reopenMadeDir), which costs a lookup per path component.
const maxHeld = 64

// reopenMadeDir opens the target directory rel ("" for the top) that this
// preparation made, from the target's descriptor, one component at a time
// without following a symlink, and checks that it is still the inode made:
// a directory swapped in meanwhile is an error, not a place to link into.
func (t *tree) reopenMadeDir(rel string) (*os.File, error) {
	d, err := openDirAt(t.dstDir, ".")
	if err != nil {
		return nil, err
	}
	if rel == "" {
		return d, nil
	}
	for _, c := range strings.Split(rel, "/") {
		next, err := openDirAt(d, c)
		d.Close()
		if err != nil {
			return nil, err
		}
		d = next
	}
	m, ok := t.madeAs(rel)
	var st unix.Stat_t
	if err := unix.Fstat(int(d.Fd()), &st); err != nil {
		d.Close()
		return nil, &os.PathError{Op: "fstat", Path: path.Join(t.dst, rel), Err: err}
	}
	if !ok || m.act != actDir || m.dev != st.Dev || m.ino != st.Ino {
		d.Close()
		return nil, fmt.Errorf("%s is no longer the directory this preparation made", path.Join(t.dst, rel))
	}
	return d, nil
}
