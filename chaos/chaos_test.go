package chaos

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nodeid/nodeid/internal/versitygw"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if line := versitygw.SkipSummary(); line != "" {
		fmt.Fprintln(os.Stderr, line)
	}
	os.Exit(code)
}

// TestChaosShortSubset runs the experiments marked Short (lease overwrite,
// kill -9, pause) against real nodeid-init processes and VersityGW, and
// fails on any unmet expectation or invariant violation. It is what CI runs
// of the chaos suite on every change; `make chaos` runs all of it.
func TestChaosShortSubset(t *testing.T) {
	versity, skip, err := versitygw.ForTest()
	if skip != "" {
		versitygw.NoteSkip(t.Name())
		t.Skip(skip)
	}
	if err != nil {
		t.Fatal(err)
	}
	// The build has its own bound; each experiment is bounded by its own
	// Timeout (Run), so a slow build or a loaded machine does not eat into
	// the last experiment's time.
	bctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	nodeInit, broker, err := Build(bctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	cfg := Config{NodeInit: nodeInit, Broker: broker, Versity: versity, WorkDir: dir, Keep: true, Logf: t.Logf}
	var results []*Result
	for _, e := range Experiments() {
		if !e.Short {
			continue
		}
		t.Run(e.Name, func(t *testing.T) {
			r := Run(ctx, cfg, e)
			results = append(results, r)
			if r.Err != nil {
				t.Errorf("%s: %v", e.Name, r.Err)
			}
			for _, v := range r.Violations {
				t.Errorf("%s: invariant violated: %v", e.Name, v)
			}
			if r.Writes == 0 {
				t.Errorf("%s: no writes were checked", e.Name)
			}
			if !r.Pass {
				t.Logf("files of %s kept in %s", e.Name, r.Dir)
				logTail(t, r.Dir)
			}
		})
	}
	if len(results) < 3 {
		t.Fatalf("ran %d short experiments, want at least 3 (overwrite, kill -9, pause)", len(results))
	}
	t.Logf("\n%s", Table(results))
}

// logTail shows the supervisors' last log lines of a failed experiment,
// since the temporary directory is gone once the test ends.
func logTail(t *testing.T, dir string) {
	entries, _ := os.ReadDir(dir + "/logs")
	for _, e := range entries {
		b, _ := os.ReadFile(dir + "/logs/" + e.Name())
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 8 {
			lines = lines[len(lines)-8:]
		}
		t.Logf("--- %s:\n%s", e.Name(), strings.Join(lines, "\n"))
	}
}
