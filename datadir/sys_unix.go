//go:build unix

package datadir

import "golang.org/x/sys/unix"

// checkWritable asks the kernel rather than reading mode bits: ACLs, a
// read-only mount or an immutable flag make a directory unwritable whatever
// its mode says.
func checkWritable(dir string) error {
	return unix.Access(dir, unix.W_OK|unix.X_OK)
}
