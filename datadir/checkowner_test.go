package datadir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// CheckOwner judges as Prepare does and writes nothing: a root of another
// cluster (or with an owner file naming none) is refused, a root of c or
// one not claimed yet is fine and stays unclaimed.
func TestCheckOwnerReadsOnly(t *testing.T) {
	a, b := Cluster{Bucket: "a", Prefix: "p/"}, Cluster{Bucket: "a", Prefix: "q/"}
	root := t.TempDir()
	if err := CheckOwner(root, b); err != nil {
		t.Fatalf("unclaimed root: %v", err)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Fatalf("CheckOwner wrote %v", entries)
	}
	owner := filepath.Join(root, OwnerName)
	if err := os.WriteFile(owner, []byte(`{"bucket":"a","prefix":"p/"}`), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := CheckOwner(root, a); err != nil {
		t.Errorf("own root: %v", err)
	}
	err := CheckOwner(root, b)
	if !errors.Is(err, ErrForeignCluster) {
		t.Fatalf("root of %s checked for %s: %v, want ErrForeignCluster", a, b, err)
	}
	if want := root + " belongs to s3://a/p/ (" + OwnerName + "), not s3://a/q/"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q lacks %q", err, want)
	}
	if err := os.WriteFile(owner, []byte(`not json`), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := CheckOwner(root, a); !errors.Is(err, ErrForeignCluster) {
		t.Errorf("unparsable owner file: %v, want ErrForeignCluster", err)
	}
	if err := CheckOwner(root, Cluster{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("no cluster: %v, want ErrInvalid", err)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 1 {
		t.Errorf("CheckOwner wrote %v", entries)
	}
}
