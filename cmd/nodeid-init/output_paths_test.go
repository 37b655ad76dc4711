package main_test

// Adversarial review of the peers feature, command side (invariant 3: bad
// input, peers-file paths and templates included, gets one error line and
// exit 2 before anything is acquired or written).

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/s3test"
)

// run writes three files per tenure: the lease file (rewritten at every
// renewal; the broker's proof of validity, `health`), the peers file
// (rewritten on every change of the table) and each template's DST
// (rendered once). Nothing checks that they are distinct paths, so a
// configuration naming one path twice is accepted: the lease is taken, the
// data directory prepared, and the files overwrite each other.
func TestCollidingOutputPathsAreBadInput(t *testing.T) {
	const child = `cat "$NODE_LEASE_FILE" > "$REPORT.lease" 2>&1; ` +
		`"$NODEID_BIN" health --lease-file "$NODE_LEASE_FILE" > "$REPORT.health" 2>&1; echo "exit $?" >> "$REPORT.health"; ` +
		`echo done > "$REPORT"`
	cases := []struct {
		name string
		env  func(dir, tmpl string) []string
		look string // file whose content shows the harm
	}{
		{"peers file is the lease file", func(dir, _ string) []string {
			f := filepath.Join(dir, "nodeid.json")
			return []string{"NODEID_LEASE_FILE=" + f, "NODEID_PEERS_FILE=" + f}
		}, "health"},
		{"template DST is the peers file", func(dir, tmpl string) []string {
			f := filepath.Join(dir, "server.properties")
			return []string{"NODEID_PEERS_FILE=" + f, "NODEID_TEMPLATES=" + tmpl + ":" + f}
		}, "server.properties"},
		{"template DST is the lease file", func(dir, tmpl string) []string {
			f := filepath.Join(dir, "lease.json")
			return []string{"NODEID_LEASE_FILE=" + f, "NODEID_TEMPLATES=" + tmpl + ":" + f}
		}, "lease"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, s3test.NewFake(t), 1)
			tmpl := filepath.Join(c.dir, "server.properties.tmpl")
			if err := os.WriteFile(tmpl, []byte("node.id={{.NodeID}}\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			env := append(tc.env(c.dir, tmpl), "NODEID_ADVERTISE_ADDRESS=10.0.0.1", "NODEID_BIN="+binary)
			tk := c.start("t", env, "run", "--", "sh", "-c", child)
			code := tk.wait(t, 30*time.Second)
			out := strings.TrimSpace(tk.out.String())
			l, err := c.repo().List(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if code != 2 || len(l.Slots) != 0 {
				seen := func(name string) string {
					b, _ := os.ReadFile(tk.report + "." + name)
					return strings.TrimSpace(string(b))
				}
				var harm string
				switch tc.look {
				case "health":
					harm = "the child's `health --lease-file $NODE_LEASE_FILE` while holding: " + seen("health")
				case "lease":
					harm = "the child's NODE_LEASE_FILE: " + seen("lease")
				default:
					b, _ := os.ReadFile(filepath.Join(c.dir, tc.look))
					harm = "the rendered " + tc.look + " as the child found it: " + truncate(strings.TrimSpace(string(b)), 200)
				}
				t.Errorf("exit code %d, %d lease objects written; want exit 2 and nothing acquired.\n%s", code, len(l.Slots), harm)
			}
			_ = out
		})
	}
}
