//go:build !linux

package datadir

import (
	"os"
	"testing"
)

func readOnlyDir(t *testing.T) string {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	return dir
}
