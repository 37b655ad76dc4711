package nodeid

import "errors"

// IsNoSuchBucket reports an error that says the bucket does not exist: the
// server's code is NoSuchBucket, or a List was answered 404 (a listing of an
// existing bucket is never 404, whatever code the server gives). Retrying
// will not help.
func IsNoSuchBucket(err error) bool {
	var se *StorageError
	if !errors.As(err, &se) {
		return false
	}
	return se.Code == "NoSuchBucket" || (se.Op == "list" && errors.Is(se, ErrNotFound))
}
