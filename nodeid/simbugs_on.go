//go:build simbugs

package nodeid

// simBugs are the deliberate bugs switched on, set only by the simulation's
// teeth tests, one run at a time.
var simBugs simBug

func bugOn(b simBug) bool { return simBugs&b != 0 }
