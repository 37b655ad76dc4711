//go:build !linux

package datadir

import (
	"io/fs"
	"os"
	"path"
)

// syncTree makes everything written below dir durable by fsyncing every file
// and directory, the portable equivalent of syncfs(2).
func syncTree(node *os.Root, dir string) error {
	return fs.WalkDir(node.FS(), dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil
		}
		f, err := node.Open(path.Clean(p))
		if err != nil {
			return err
		}
		serr := f.Sync()
		if cerr := f.Close(); serr == nil {
			serr = cerr
		}
		return serr
	})
}
