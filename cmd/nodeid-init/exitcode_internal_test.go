package main

import (
	"fmt"
	"testing"

	"github.com/nodeid/nodeid/nodeid"
)

// A missing bucket is a configuration error (exit 2) whether the server says
// NoSuchBucket or answers a listing 404 with another code (a gateway or a
// wrong endpoint), as nodeid.IsNoSuchBucket and the library's IsPermanent
// judge it; a 404 of one object is not.
func TestNoSuchBucketExitsWithUsage(t *testing.T) {
	for _, c := range []struct {
		err  *nodeid.StorageError
		want int
	}{
		{&nodeid.StorageError{Op: "list", Status: 404, Code: "NoSuchBucket", Kind: nodeid.ErrNotFound}, exitUsage},
		{&nodeid.StorageError{Op: "list", Status: 404, Code: "NotFound", Kind: nodeid.ErrNotFound}, exitUsage},
		{&nodeid.StorageError{Op: "get", Key: "p/0.json", Status: 404, Code: "NoSuchKey", Kind: nodeid.ErrNotFound}, exitError},
	} {
		if got := exitCode(fmt.Errorf("acquire: %w", c.err)); got != c.want {
			t.Errorf("exitCode(%s %d %s) = %d, want %d", c.err.Op, c.err.Status, c.err.Code, got, c.want)
		}
	}
}
