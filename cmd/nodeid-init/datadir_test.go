package main

import (
	"fmt"
	"testing"

	"github.com/nodeid/nodeid/datadir"
)

// Refusals caused by the data root's content exit 6: retrying cannot help.
// Other preparation failures stay 1.
func TestDataRefusalsExit6(t *testing.T) {
	for err, want := range map[error]int{
		datadir.ErrNewerVersion:   exitDataRefused,
		datadir.ErrVersionUsed:    exitDataRefused,
		datadir.ErrUnrecognized:   exitDataRefused,
		datadir.ErrForeignCluster: exitDataRefused,
		datadir.ErrUnsafeSymlink:  exitError,
		datadir.ErrValidation:     exitError,
	} {
		wrapped := fmt.Errorf("prepare data directory: %w", fmt.Errorf("%w: details", err))
		if got := exitCode(wrapped); got != want {
			t.Errorf("%v: exit code %d, want %d", err, got, want)
		}
	}
}
