//go:build !simbugs

package nodeid

// bugOn is false: without the simbugs tag no deliberate bug exists.
func bugOn(simBug) bool { return false }
