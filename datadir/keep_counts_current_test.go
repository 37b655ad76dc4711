package datadir

import (
	"context"
	"slices"
	"testing"
)

// Keep counts the current version: --keep-versions 1 keeps only it, the
// default 2 keeps one earlier valid version (review 2 found the docs saying
// "besides the current one"; the docs were wrong, not the code).
func TestKeepCountsTheCurrentVersion(t *testing.T) {
	for _, keep := range []int{1, 2} {
		root := t.TempDir()
		for v := 1; v <= 4; v++ {
			makeVersion(t, root, 0, nodeidVersion(int64(v)), map[string]string{"v": "data"}, nodeidVersion(int64(v)))
		}
		if _, err := Collect(context.Background(), root, inst(0, 4), Options{Keep: keep, Logger: quiet}); err != nil {
			t.Fatal(err)
		}
		got := versionsOf(t, root, 0)
		want := []string{"v4"}
		if keep == 2 {
			want = []string{"v3", "v4"}
		}
		if !slices.Equal(got, want) {
			t.Errorf("Keep %d with current v4: left %v, want %v (the current version plus %d earlier)", keep, got, want, keep-1)
		}
	}
}
