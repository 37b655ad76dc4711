package datadir

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"syscall"
	"testing"
)

// tmpfsWithTwoVersions mounts a small tmpfs (smallTmpfsRoot) and returns a
// data root on it where node 0's v1 and v2 each hold one file, "a", of
// content big: v2 the source of v3, v1 beyond retention once v3 is valid
// with Keep 2.
func tmpfsWithTwoVersions(t *testing.T, big string) string {
	t.Helper()
	_, root := smallTmpfsRoot(t)
	makeVersion(t, root, 0, 1, map[string]string{"a": big}, 1)
	makeVersion(t, root, 0, 2, map[string]string{"a": big}, 2)
	return root
}

// Issue 24.6: on a full file system holding a version beyond retention and
// the source, the copy runs out of space; the version that garbage
// collection would remove after the copy is removed then, and the copy made
// again, once. A version within retention, the source and anything not
// ours are never removed for space. On a 4 MiB tmpfs: v1 and v2 hold
// 1.5 MB each, v3's copy needs 1.5 MB more.
func TestNoSpaceFreesWhatRetentionAllows(t *testing.T) {
	big := string(bytes.Repeat([]byte("x"), 1500<<10))
	for _, tc := range []struct {
		keep    int
		wantErr bool
		want    []string
	}{
		{keep: 2, want: []string{"v2", "v3"}},                // v1 is beyond Keep once v3 is valid
		{keep: 1, want: []string{"v3"}},                      // v2 too, but only after v3 is valid
		{keep: 3, wantErr: true, want: []string{"v1", "v2"}}, // v1 is kept: ENOSPC stands
	} {
		root := tmpfsWithTwoVersions(t, big)
		// Not ours, below the source: never removed.
		makeVersion(t, root, 0, 0, map[string]string{"x": "y"}, -1)
		_, res, err := Prepare(context.Background(), root, inst(0, 3), Options{Logger: quiet, Keep: tc.keep, Tenure: "task-3"})
		switch {
		case tc.wantErr && !errors.Is(err, syscall.ENOSPC):
			t.Errorf("keep %d: err = %v, want ENOSPC", tc.keep, err)
		case !tc.wantErr && err != nil:
			t.Errorf("keep %d: Prepare v3: %v", tc.keep, err)
		case !tc.wantErr && !slices.Contains(res.Removed, Dir(root, inst(0, 1))):
			t.Errorf("keep %d: Removed = %v, want it to list v1", tc.keep, res.Removed)
		}
		want := append([]string{"v0"}, tc.want...)
		if got := versionsOf(t, root, 0); !slices.Equal(got, want) {
			t.Errorf("keep %d: versions %v, want %v", tc.keep, got, want)
		}
		if !tc.wantErr {
			equalMaps(t, contents(t, Dir(root, inst(0, 3))), map[string]string{"a": big})
		}
	}
}
