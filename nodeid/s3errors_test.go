package nodeid_test

import (
	"fmt"
	"testing"

	"github.com/nodeid/nodeid/nodeid"
)

func TestIsNoSuchBucket(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"code NoSuchBucket", &nodeid.StorageError{Op: "get", Status: 404, Code: "NoSuchBucket", Kind: nodeid.ErrNotFound}, true},
		{"list answered 404", &nodeid.StorageError{Op: "list", Status: 404, Code: "NotFound", Kind: nodeid.ErrNotFound}, true},
		{"wrapped", fmt.Errorf("acquire: %w", &nodeid.StorageError{Op: "list", Code: "NoSuchBucket", Kind: nodeid.ErrNotFound}), true},
		{"missing lease object", &nodeid.StorageError{Op: "get", Status: 404, Code: "NoSuchKey", Kind: nodeid.ErrNotFound}, false},
		{"list unavailable", &nodeid.StorageError{Op: "list", Kind: nodeid.ErrUnavailable}, false},
		{"not a storage error", nodeid.ErrNotFound, false},
	} {
		if got := nodeid.IsNoSuchBucket(c.err); got != c.want {
			t.Errorf("%s: IsNoSuchBucket = %v, want %v", c.name, got, c.want)
		}
	}
}
