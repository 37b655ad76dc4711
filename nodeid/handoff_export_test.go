package nodeid

import (
	"errors"
	"testing"
)

// SetBootIDForTest makes id this host's boot ID until t ends; with id ""
// the boot ID cannot be read.
func SetBootIDForTest(t testing.TB, id string) {
	old := systemBootID
	systemBootID = func() (string, error) {
		if id == "" {
			return "", errors.New("no boot ID (test)")
		}
		return id, nil
	}
	t.Cleanup(func() { systemBootID = old })
}
