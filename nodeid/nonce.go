package nodeid

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// newNonce returns 16 random bytes in hex. A nonce in every write makes every
// write's ETag unique and lets a writer recognise its own write.
func newNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// The nonce rides in the body as JSON whitespace after the value.
//
// S3's ETag of a plain PUT is the MD5 of the body and nothing else, so the
// nonce must be in the body for every write to have its own ETag. Camunda's
// parser rejects any field it does not know, but JSON allows whitespace
// after the value, and every parser skips it: the body stays exactly
// Camunda's document and still differs in every write.
//
// Layout, right after the JSON value: 4 symbols giving the nonce's length n
// (0..255), then 4 symbols per byte of the nonce, 2 bits per symbol, most
// significant first; anything after that is spaces (padding). Symbol 0 is a
// space, so a body with no nonce, or padded with spaces only, reads as
// length 0: no nonce.
var nonceSymbols = [4]byte{' ', '\t', '\n', '\r'}

// maxNonceLen is what one length byte can say.
const maxNonceLen = 255

// appendNonce appends the whitespace form of nonce to body.
func appendNonce(body []byte, nonce string) []byte {
	if len(nonce) > maxNonceLen {
		// Nonces are made here (32 hex digits) or by tests: a longer one
		// is a programming error, not input.
		panic(fmt.Sprintf("nodeid: nonce of %d bytes", len(nonce)))
	}
	body = appendNonceByte(body, byte(len(nonce)))
	for i := 0; i < len(nonce); i++ {
		body = appendNonceByte(body, nonce[i])
	}
	return body
}

func appendNonceByte(body []byte, b byte) []byte {
	for shift := 6; shift >= 0; shift -= 2 {
		body = append(body, nonceSymbols[(b>>shift)&3])
	}
	return body
}

// readNonce reads the whitespace form at the start of tail (what follows the
// JSON value) and checks that the rest is padding. An empty or all-space
// tail has no nonce ("").
func readNonce(tail []byte) (string, error) {
	next := func() (byte, error) {
		if len(tail) < 4 {
			return 0, fmt.Errorf("nonce cut short")
		}
		var b byte
		for _, c := range tail[:4] {
			v := bytes.IndexByte(nonceSymbols[:], c)
			if v < 0 {
				return 0, fmt.Errorf("byte %q after the JSON value", c)
			}
			b = b<<2 | byte(v)
		}
		tail = tail[4:]
		return b, nil
	}
	if len(bytes.Trim(tail, " ")) == 0 {
		return "", nil
	}
	n, err := next()
	if err != nil {
		return "", err
	}
	nonce := make([]byte, n)
	for i := range nonce {
		if nonce[i], err = next(); err != nil {
			return "", err
		}
	}
	if len(bytes.Trim(tail, " ")) != 0 {
		return "", fmt.Errorf("data after the nonce")
	}
	return string(nonce), nil
}
