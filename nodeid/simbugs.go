package nodeid

// simBug names a deliberate protocol bug. The simulation's teeth tests turn
// them on one at a time to show that its invariants catch each one. Only a
// build with the simbugs tag can turn one on (simbugs_on.go); in every other
// build bugOn is the constant false (simbugs_off.go) and the compiler drops
// the buggy branches.
type simBug uint

const (
	bugNoMargin              simBug = 1 << iota // validity until s + L instead of s + L - m
	bugWallClockExpiry                          // judge expiry by the holder's timestamp and our wall clock
	bugRenewAfterDeadline                       // accept renewals answered after the deadline; no watchdog
	bugNoNonce                                  // released and never-held bodies empty: equal ETags (ABA)
	bugScaleKeepsBody                           // Scale marks a released lease unusable without a new body
	bugFreshFromAbsence                         // fresh = no held object seen; never-held taken without the marker
	bugIgnoreClaimedDuration                    // a waiter ignores the duration a Camunda lease claims (Record.ClaimedDuration)
	bugVersionNotBumped                         // a take keeps the highest known version instead of version + 1
	bugVersionFromObject                        // a take ignores the known mappings: the object's version + 1
	bugWriteAfterLoss                           // a holder sends one more renewal after it lost its lease
	bugReleasedNeverFree                        // a waiter never counts a released lease as free
	bugAdoptStretches                           // Adopt inherits a lease duration more than the hand-off carried
	bugTakeAfterFailedSurvey                    // a take goes ahead although a lease of the survey could not be read
)
