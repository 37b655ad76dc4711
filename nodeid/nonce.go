package nodeid

import (
	"crypto/rand"
	"encoding/hex"
)

// newNonce returns 16 random bytes in hex. A nonce in every write makes every
// write's ETag unique and lets a writer recognise its own write.
func newNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}
