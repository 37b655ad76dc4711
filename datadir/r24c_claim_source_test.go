package datadir

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// A valid source that still holds a claim (a removal claimed it and
// crashed before its rename, its preparer having put its marker in place
// in between) is copied without it: the claim belongs to that directory,
// never to a later version.
func TestClaimInAValidSourceIsNotCarriedOver(t *testing.T) {
	root := t.TempDir()
	c := Cluster{Bucket: "b", Prefix: "p/"}
	files := map[string]string{"d0/f0": "data"}
	src := makeVersion(t, root, 0, 1, files, 1)
	b, err := json.Marshal(inProgress{Version: 1, Bucket: c.Bucket, Prefix: c.Prefix, Tenure: "task-A"})
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, src, map[string]string{claimName: string(b)})
	dir, _, err := Prepare(context.Background(), root, inst(0, 2), Options{Cluster: c, Tenure: "task-B", Logger: quiet})
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, claimName)); err == nil {
		t.Errorf("%s carried the source's claim over", dir)
	}
	if got := contents(t, dir); got["d0/f0"] != "data" {
		t.Errorf("%s holds %v; want the source's data", dir, got)
	}
}
