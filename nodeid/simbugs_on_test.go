//go:build simbugs

package nodeid

import "testing"

const simBugsBuild = true

// setSimBugs switches on the provider's deliberate bugs for one run.
func setSimBugs(_ *testing.T, b simBug) { simBugs = b }
