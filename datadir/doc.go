// Package datadir prepares versioned data directories on shared storage.
//
// A task that holds node N under version K works in <root>/node-N/vK. The
// version is the fencing token of the lease: a holder that lost its lease
// without noticing may keep writing into its own directory, so its successor
// never uses that directory. Instead, Prepare creates a fresh vK from the
// newest earlier version that was completely prepared, and marks it complete
// with a marker file written last. A directory without a valid marker is
// never used; it is removed only if it is positively this cluster's own
// leftover (see PreparingName), and anything else is left in place.
//
// A stale holder cannot write into a newer version: its directory's name
// is its own, older version, and nothing it holds open is shared with the
// new directory except files it is known not to write. Files are
// hard-linked where sharing them cannot hurt: all files when the
// previous holder released its lease gracefully (it has stopped writing)
// and the source is its version, otherwise only files matching Options.Immutable or Options.Rules (for
// example the zeebe preset, Camunda 8.9's own rules). Everything else is copied,
// because a stale holder may still write it. The copy is validated against
// its source before the marker is written, so a source changed meanwhile
// leaves the new version unmarked. Prepare refuses, touching nothing, a
// version that is already initialized or lies below a valid newer one
// (ErrVersionUsed, ErrNewerVersion).
//
// Garbage collection (Collect, and Prepare after it succeeded) keeps the
// newest Options.Keep valid versions, the current one included, and never
// touches anything at or above the current version: a newer directory may
// be being prepared by the task that holds the node now. Below it, it
// removes only what it can positively identify as this cluster's: valid
// versions beyond Keep, its own unfinished preparations and directories
// without data. Anything it cannot identify (a marker it cannot read,
// perhaps of a newer format; a leftover naming another cluster; a file or
// symlink named like a version) is logged and left in place, because
// deleting data that is not provably ours or provably obsolete can lose a
// node's only copy.
package datadir
