package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The documented policy must let a read of a missing key be a 404: S3
// answers 403 unless the caller has s3:ListBucket on the bucket, and a grant
// limited by s3:prefix does not count for a GetObject. nodeid-init reads
// missing keys on every new cluster, and takes a 403 for access denied.
// ecs.md shows the same policy as iam-policy.json.
func TestIAMPolicyLetsMissingKeysBe404(t *testing.T) {
	docs := filepath.Join("..", "..", "docs")
	file, err := os.ReadFile(filepath.Join(docs, "iam-policy.json"))
	if err != nil {
		t.Fatal(err)
	}
	type statement struct {
		Effect    string
		Action    any
		Resource  any
		Condition map[string]any
	}
	var policy struct{ Statement []statement }
	if err := json.Unmarshal(file, &policy); err != nil {
		t.Fatal(err)
	}
	listed := false
	for _, s := range policy.Statement {
		if s.Effect == "Allow" && s.Action == "s3:ListBucket" && s.Resource == "arn:aws:s3:::BUCKET" && len(s.Condition) == 0 {
			listed = true
		}
	}
	if !listed {
		t.Errorf("iam-policy.json grants no unconditional s3:ListBucket on the bucket:\n%s", file)
	}

	md, err := os.ReadFile(filepath.Join(docs, "ecs.md"))
	if err != nil {
		t.Fatal(err)
	}
	const intro = "[iam-policy.json](iam-policy.json):\n\n```json\n"
	_, block, ok := strings.Cut(string(md), intro)
	block, _, _ = strings.Cut(block, "```")
	var inDoc, inFile any
	if err := json.Unmarshal([]byte(block), &inDoc); !ok || err != nil {
		t.Fatalf("ecs.md: no policy after %q: %v", intro, err)
	}
	_ = json.Unmarshal(file, &inFile)
	if !reflect.DeepEqual(inDoc, inFile) {
		t.Errorf("ecs.md's policy differs from iam-policy.json:\n%s", block)
	}
}
