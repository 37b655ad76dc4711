package main_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
)

// A prefix on a bucket whose root holds Camunda's leases makes a second,
// independent lease set (docs/migration.md, condition 4): the start-up
// warns once, naming both prefixes, and only when the root's marker exists.
func TestPrefixWarnsWhenTheBucketRootHoldsLeases(t *testing.T) {
	srv := s3test.StartVersity(t)
	c := newCluster(t, srv, 2) // NODEID_PREFIX=e2e/
	const warning = "the bucket root holds node-ids-initialized"

	before := c.runTask("before")
	before.identity(t, 20*time.Second)
	if strings.Contains(before.out.String(), warning) {
		t.Errorf("warned without a marker at the bucket root:\n%s", before.out.String())
	}

	putObject(t, srv, "node-ids-initialized", "", nil) // as Camunda writes it: empty
	after := c.runTask("after")
	after.identity(t, 20*time.Second)
	var lines []string
	for _, l := range strings.Split(after.out.String(), "\n") {
		if strings.Contains(l, warning) {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("%d warning lines, want 1:\n%s", len(lines), after.out.String())
	}
	for _, want := range []string{"level=WARN", `root_prefix=""`, "prefix=e2e/"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("warning lacks %s: %s", want, lines[0])
		}
	}
}
