// Package node holds the two values every part of nodeid shares: a node ID's
// tenure (Instance) and its fencing token (Version). It imports nothing
// beyond the standard library, so a package that only stamps data with a
// tenure (datadir, a broker) does not pull in the lease protocol or the AWS
// SDK. Package nodeid re-exports both as nodeid.NodeInstance and
// nodeid.Version.
package node

import "fmt"

// Version counts the acquisitions of one node ID. Every acquisition writes
// previous+1, so a version is never handed out twice: it is the fencing
// token that data directories (node-N/vK) and side effects are stamped with.
type Version int64

// MaxVersion is the largest version accepted: 2^53 - 1, exact in every JSON
// parser (a Java long, a JavaScript number), and far enough from the int64
// limit that version + 1 cannot wrap. A lease or mapping naming a larger one
// is corrupt.
const MaxVersion Version = 1<<53 - 1

// Instance is one tenure of a node ID: the ID and the version under which a
// task holds it.
type Instance struct {
	ID      int     `json:"id"`
	Version Version `json:"version"`
}

func (n Instance) String() string { return fmt.Sprintf("node %d v%d", n.ID, n.Version) }
