//go:build !simbugs

package nodeid

import "testing"

const simBugsBuild = false

// setSimBugs: a build without the simbugs tag has no deliberate bugs.
func setSimBugs(t *testing.T, b simBug) {
	if b != 0 {
		t.Fatal("deliberate provider bugs need -tags simbugs")
	}
}
