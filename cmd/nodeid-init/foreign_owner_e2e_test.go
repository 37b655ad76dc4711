package main_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nodeid/nodeid/internal/s3test"
)

// A data root claimed by cluster A is refused to a task of cluster B
// (another prefix, another bucket) before B takes anything: exit 6, one
// line naming both clusters and the fix, no lease and no version used in
// B's bucket, and the data root byte-for-byte as A left it.
func TestDataRootOfAnotherClusterIsRefusedBeforeAcquiring(t *testing.T) {
	srvA := s3test.StartVersity(t)
	a := newCluster(t, srvA, 1)
	owner := a.runTask("owner")
	owner.identity(t, 20*time.Second)
	if err := owner.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := owner.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("owner exited %d:\n%s", code, owner.out.String())
	}
	if _, err := os.Stat(filepath.Join(a.root, "nodeid-cluster.json")); err != nil {
		t.Fatalf("cluster A did not claim its data root: %v", err)
	}
	rootBefore := snapshotTree(t, a.root)

	srvB := s3test.StartVersity(t)
	otherBucket := newCluster(t, srvB, 1)
	envFile := filepath.Join(t.TempDir(), "node.env")
	cases := []struct {
		name, bucket, prefix string
		c                    *cluster
		args                 []string
	}{
		{"run of another prefix", srvA.Bucket, "other/", a, []string{"run", "--", "sh", "-c", childScript}},
		{"acquire of another prefix", srvA.Bucket, "other/", a, []string{"acquire", "--env-file", envFile}},
		{"run of another bucket", srvB.Bucket, "e2e/", otherBucket, []string{"run", "--", "sh", "-c", childScript}},
		{"acquire of another bucket", srvB.Bucket, "e2e/", otherBucket, []string{"acquire", "--env-file", envFile}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objsA, objsB := bucketObjects(t, srvA), bucketObjects(t, srvB)
			tk := tc.c.start("stranger", []string{"NODEID_DATA_ROOT=" + a.root, "NODEID_PREFIX=" + tc.prefix}, tc.args...)
			if code := tk.wait(t, 20*time.Second); code != 6 {
				t.Fatalf("exit code %d, want 6 (data root refused):\n%s", code, tk.out.String())
			}
			out := tk.out.String()
			lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
			if len(lines) != 1 {
				t.Errorf("output is not one line:\n%s", out)
			}
			for _, want := range []string{
				"belongs to s3://" + srvA.Bucket + "/e2e/ (nodeid-cluster.json), not s3://" + tc.bucket + "/" + tc.prefix,
				"no node ID was taken", "--data-root, --bucket and --prefix",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			if strings.Contains(out, "handed off") {
				t.Errorf("output says handed off:\n%s", out)
			}
			if got := bucketObjects(t, srvA); got != objsA {
				t.Errorf("bucket %s changed:\nbefore %s\nafter  %s", srvA.Bucket, objsA, got)
			}
			if got := bucketObjects(t, srvB); got != objsB {
				t.Errorf("bucket %s changed:\nbefore %s\nafter  %s", srvB.Bucket, objsB, got)
			}
			if got := snapshotTree(t, a.root); got != rootBefore {
				t.Errorf("data root changed:\nbefore %s\nafter  %s", rootBefore, got)
			}
			if _, err := os.Stat(envFile); err == nil {
				t.Error("env file written")
			}
		})
	}
}

// snapshotTree renders every entry under root with its mode, size,
// modification time and content: equal strings mean an unchanged tree.
func snapshotTree(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		fmt.Fprintf(&b, "%s %v %d %d", rel, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		if fi.Mode().IsRegular() {
			content, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %q", content)
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// bucketObjects lists every object of srv's bucket with its ETag.
func bucketObjects(t *testing.T, srv *s3test.Server) string {
	t.Helper()
	out, err := srv.Client(t).ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(srv.Bucket)})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, o := range out.Contents {
		fmt.Fprintf(&b, "%s=%s ", aws.ToString(o.Key), aws.ToString(o.ETag))
	}
	return b.String()
}
