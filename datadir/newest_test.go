package datadir

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Newest (release --force --data-root) judges as Prepare of the same cluster
// does: our own leftover of a crash during the marker write (a truncated
// marker next to our .nodeid-preparing) is passed over, not refused with
// ErrUnrecognized (review 2: Newest judged without the cluster, and the
// operator's release exited 2).
func TestNewestPassesOverOurOwnLeftover(t *testing.T) {
	root := t.TempDir()
	makeVersion(t, root, 0, 3, map[string]string{"data": "v3"}, 3)
	v4 := makeVersion(t, root, 0, 4, map[string]string{"data": "half"}, -1)
	writePreparing(t, v4, 4, clusterA)
	if err := os.WriteFile(filepath.Join(v4, MarkerName), []byte(`{"initializedAt":"2026-`), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, OwnerName), []byte(`{"bucket":"bucket-a","prefix":"prod/"}`), 0o640); err != nil {
		t.Fatal(err)
	}
	// Prepare of this cluster: v4 is our leftover, v3 the source.
	probe := t.TempDir()
	if err := os.CopyFS(probe, os.DirFS(root)); err != nil {
		t.Fatal(err)
	}
	if _, res, err := Prepare(context.Background(), probe, inst(0, 5), Options{Cluster: clusterA, Logger: quiet}); err != nil || res.Source != 3 {
		t.Fatalf("Prepare(v5) = %+v, %v; want v3 as the source", res, err)
	}
	v, ok, err := Newest(root, 0, clusterA)
	if errors.Is(err, ErrUnrecognized) || !ok || v != 3 {
		t.Errorf("Newest = %d, %v, %v; want 3 like Prepare (v4 is our own leftover)", v, ok, err)
	}
}

// Newest only reads, so a data root it cannot write will do (the EFS
// mounted read-only on an operator's machine).
func TestNewestReadsAReadOnlyRoot(t *testing.T) {
	root := readOnlyDir(t)
	if _, ok, err := Newest(root, 0, clusterA); err != nil || ok {
		t.Errorf("Newest of a read-only root without node-0 = %v, %v; want nothing found and no error", ok, err)
	}
}

// Newest refuses a root owned by another cluster, as Prepare does.
func TestNewestRefusesAForeignRoot(t *testing.T) {
	root := t.TempDir()
	makeVersion(t, root, 0, 3, map[string]string{"data": "v3"}, 3)
	if err := os.WriteFile(filepath.Join(root, OwnerName), []byte(`{"bucket":"other","prefix":""}`), 0o640); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := Newest(root, 0, clusterA); !errors.Is(err, ErrForeignCluster) {
		t.Errorf("Newest = %d, %v, %v; want ErrForeignCluster", v, ok, err)
	}
}
