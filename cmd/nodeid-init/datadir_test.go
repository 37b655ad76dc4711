package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
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

// The target created by another holder of the version between datadir's
// judgement and its mkdir is ErrVersionUsed wrapping EEXIST: a refusal, so
// exit 6 and the lease left to expire, never released as graceful.
func TestTargetCreatedMeanwhileIsADataRefusal(t *testing.T) {
	eexist := &os.PathError{Op: "mkdirat", Path: "/data/node-0/v2", Err: syscall.EEXIST}
	err := fmt.Errorf("prepare data directory: %w", fmt.Errorf("%w: /data/node-0/v2 appeared after it was judged: %w", datadir.ErrVersionUsed, eexist))
	if !isDataRefusal(err) || !errors.Is(err, fs.ErrExist) {
		t.Fatalf("isDataRefusal(%v) = false", err)
	}
	if got := exitCode(err); got != exitDataRefused {
		t.Errorf("exit code %d, want %d", got, exitDataRefused)
	}
}
