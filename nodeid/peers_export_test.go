package nodeid

import "time"

// PeerOfForTest is peerOf, for the test that keeps the GET-every-lease
// ReadPeers as its oracle.
func PeerOfForTest(rec Record, own, cluster time.Duration) Peer { return peerOf(rec, own, cluster) }
