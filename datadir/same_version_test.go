package datadir

import (
	"context"
	"errors"
	"log/slog"
	"testing"
)

// The target appears, prepared by another task holding the same version,
// between the judgement and the mkdir: a typed refusal (ErrVersionUsed), so
// that nodeid-init exits 6 and leaves the lease to expire rather than
// releasing it as graceful (found by review).
func TestTargetCreatedAfterJudgementIsVersionUsed(t *testing.T) {
	root := t.TempDir()
	// An unowned root, so that B logs its claim between judgement and mkdir.
	makeVersion(t, root, 0, 1, map[string]string{"log/segment-1": "data of v1"}, 1)

	var ra prepResult
	b := goPrepare(root, inst(0, 2), Options{Cluster: clusterA, Logger: slog.New(&pauseAt{
		msg: "datadir: data root claimed for this cluster",
		on: func() {
			dir, res, err := Prepare(context.Background(), root, inst(0, 2), Options{Cluster: clusterA, Logger: quiet})
			ra = prepResult{dir, res, err}
		},
	})})
	rb := <-b
	if ra.err != nil {
		t.Fatalf("A: %v", ra.err)
	}
	if !errors.Is(rb.err, ErrVersionUsed) {
		t.Fatalf("B: err = %v; want ErrVersionUsed, the target is A's valid directory", rb.err)
	}
	if m := readMarkerFile(t, ra.dir); m["version"] != float64(2) {
		t.Errorf("A's marker = %v", m)
	}
}
