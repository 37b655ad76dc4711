//go:build !unix

package datadir

// checkWritable has no cheap, reliable test here; a root that is not
// writable fails when the node directory is created.
func checkWritable(string) error { return nil }
