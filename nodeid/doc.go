// Package nodeid gives each task of a cluster one stable node ID, 0..N-1,
// through leases on S3, and makes sure that two live tasks never act as the
// same node. A missed start beats a duplicate: a holder that cannot prove it
// still holds its lease stops.
//
// # Lease objects and conditional writes
//
// Each node ID is one object, <prefix><id>.json, in a bucket (a Repository;
// S3Repository in production). It is written only with conditional writes:
// If-None-Match: * to create it, If-Match: <etag read> to take it over, renew
// it and release it. Every body carries a fresh nonce, so an ETag names
// exactly one write and If-Match is a compare-and-swap on the object's whole
// history; a holder whose own write's answer was lost recognises that write
// by its nonce instead of taking the 412 for a loss. Initialize (or the first
// Acquire) creates the objects and the cluster marker; Scale and ForceRelease
// are the operators' writes.
//
// # Acquire, take, renew
//
// Provider.Acquire lists the leases, judges candidates, and takes one with
// one conditional PUT (take); the renew loop then rewrites it every
// RenewInterval with If-Match on the last ETag. That path, Acquire → take →
// the renew loop (and Close's release at its end), is the only one that
// writes a lease this task holds; Adopt enters the same renew loop with a
// tenure handed over by another process. A 412 to a renewal that is not our own
// landed write means someone else wrote the object: the lease is lost.
//
// Every acquisition takes 1 + the highest version of the ID that any lease
// records. The version only grows and is the fencing token (Provider.Token):
// the data directory is per version (node-N/vK, package datadir), and every
// side effect should carry it, so a stale holder's writes can be refused.
//
// # Expiry, judged without comparing two machines' clocks
//
// A candidate never compares a timestamp another machine wrote with its own
// wall clock. It takes a held lease only when either rule says it expired:
// the server's clock (Date - Last-Modified >= L + 1s, both stamped by S3;
// ExpiredByServerClock), or its own observation (the ETag unchanged for L
// on its monotonic clock since the answer showing it arrived).
//
// # The holder's deadline and the watchdog
//
// The holder counts its validity from s, the moment it SENT its last
// successful renewal (not when the answer came: the write may have landed
// at any time after s), on the monotonic clock: it may act as holder until
// s + L - m. A watchdog timer, not a network call, ends the tenure at that
// deadline when no later renewal succeeded, even while an S3 call hangs:
// Done is closed, Valid turns false, OnFence runs (kill what uses the ID:
// before the loss is logged, so a stalled log cannot delay it), and then
// OnLost (by default: exit with ExitCodeLeaseLost). A candidate's judgement proves that deadline passed
// before its take can land, so the two tenures never overlap.
//
// # Timing rules
//
// With L the lease duration, R the renew interval, m the safety margin and T
// the request timeout, NewProvider refuses a Config that breaks
//
//	0 < T < R        each attempt ends before the next is due
//	2R <= L - m      two renewal attempts before the self-fence deadline
//	0 < m < L        (in fact max(100ms, L/20) <= m), and L >= 2s
//
// Defaults: L = 15s, R = L/3, m = L/5, T = min(R/2, 5s).
//
// # Release and hand-off
//
// Provider.Close stops renewing and releases: an If-Match write of a
// released body that keeps the version, so a waiting task takes the ID at
// once with version + 1 and knows its predecessor stopped cleanly
// (PreviousGracefullyShutdown: the data directory may be hard-linked).
// Provider.HandOff stops renewing without releasing, for an init container;
// Provider.Adopt continues that tenure in another process of the same host
// and boot, inheriting its deadline, never more, and never more than L - m
// from the send of the renewal that earned it.
//
// # Camunda 8.9
//
// A held lease's body is exactly Camunda 8.9's document, with the nonce as
// JSON whitespace after it; Camunda's empty releases and bootstrap objects
// are read and judged like held leases. Camunda brokers and nodeid tasks may
// share a bucket during a migration under the conditions in docs/design.md,
// "Mixed operation with Camunda 8.9".
//
// docs/design.md gives the protocol step by step, the safety argument and
// the schedules that once broke it; the examples show how to embed a
// Provider in a Go broker.
package nodeid
