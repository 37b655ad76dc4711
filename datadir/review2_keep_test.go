package datadir

import (
	"context"
	"slices"
	"testing"
)

// Review 2: Options.Keep is documented as "the number of valid versions that
// garbage collection keeps (besides the current one)", and nodeid-init's
// --keep-versions as "valid data-directory versions kept besides the
// current one; >= 1" (cli.md, -h). The code counts the current version
// among them: --keep-versions 1 keeps no earlier version at all, and the
// default 2 keeps one. GC deletes one valid version more than the operator
// asked it to keep.
func TestReview2KeepCountsBesidesTheCurrentVersion(t *testing.T) {
	for _, keep := range []int{1, 2} {
		root := t.TempDir()
		for v := 1; v <= 4; v++ {
			makeVersion(t, root, 0, nodeidVersion(int64(v)), map[string]string{"v": "data"}, nodeidVersion(int64(v)))
		}
		if _, err := Collect(context.Background(), root, inst(0, 4), Options{Keep: keep, Logger: quiet}); err != nil {
			t.Fatal(err)
		}
		got := versionsOf(t, root, 0)
		want := []string{"v3", "v4"}
		if keep == 2 {
			want = []string{"v2", "v3", "v4"}
		}
		if !slices.Equal(got, want) {
			t.Errorf("Keep %d with current v4: left %v, want %v (current plus %d earlier valid versions)", keep, got, want, keep)
		}
	}
}
