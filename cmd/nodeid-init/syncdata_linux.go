package main

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// openDataDir opens the data directory <root>/node-N/vK that Prepare
// returned. The root is the operator's path (it may lead through
// symlinks); node-N and vK are opened below it without following a
// symlink, so one swapped in meanwhile cannot send the flush to another
// file system.
func openDataDir(dir string) (*os.File, error) {
	ver, node := filepath.Base(dir), filepath.Base(filepath.Dir(dir))
	root := filepath.Dir(filepath.Dir(dir))
	f, err := os.Open(root)
	if err != nil {
		return nil, err
	}
	for _, name := range []string{node, ver} {
		fd, err := unix.Openat(int(f.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		p := filepath.Join(f.Name(), name)
		f.Close()
		if err != nil {
			return nil, &os.PathError{Op: "openat (no symlink followed)", Path: p, Err: err}
		}
		f = os.NewFile(uintptr(fd), p)
	}
	return f, nil
}
