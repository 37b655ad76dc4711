package nodeid

import (
	"fmt"
	"strings"
)

// The names S3 accepts, checked before any request so that a typo is a
// configuration error and not an S3 answer.

// ValidateBucket checks an S3 bucket name (3-63 lowercase letters, digits,
// dots and hyphens, starting and ending with a letter or digit).
func ValidateBucket(b string) error {
	ok := len(b) >= 3 && len(b) <= 63
	for i, r := range b {
		alnum := (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9')
		if !alnum && (r != '.' && r != '-' || i == 0 || i == len(b)-1) {
			ok = false
		}
	}
	if !ok {
		return fmt.Errorf("%w: bucket %q: 3-63 lowercase letters, digits, dots and hyphens", ErrInvalidConfig, b)
	}
	return nil
}

// ValidatePrefix checks a key prefix: at most 512 bytes of printable ASCII,
// not starting with "/". A prefix usually ends with "/" ("clusters/a/").
func ValidatePrefix(p string) error {
	if len(p) > 512 || strings.HasPrefix(p, "/") {
		return fmt.Errorf("%w: prefix %q: at most 512 characters, not starting with /", ErrInvalidConfig, p)
	}
	for _, r := range p {
		if r < ' ' || r > '~' {
			return fmt.Errorf("%w: prefix %q: only printable ASCII", ErrInvalidConfig, p)
		}
	}
	return nil
}
