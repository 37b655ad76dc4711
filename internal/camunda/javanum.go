package camunda

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// Java's number parsing differs from Go's in ways that decide whether
// Camunda can read a lease: Long.parseLong accepts a leading '+' and any
// Unicode decimal digit of the Basic Multilingual Plane (it works on UTF-16
// chars), and String.trim removes every char up to U+0020, not only JSON
// whitespace. The helpers below reproduce those rules.

var errJavaNumber = errors.New("not a Java number")

// javaTrim is java.lang.String.trim: it strips chars <= U+0020 at both ends.
func javaTrim(s string) string {
	return strings.TrimFunc(s, func(r rune) bool { return r <= ' ' })
}

// javaDigit is Character.digit(char, 10): the value of a BMP decimal digit,
// or -1.
func javaDigit(r rune) int {
	if r > 0xFFFF || !unicode.IsDigit(r) {
		return -1
	}
	// Unicode allocates decimal digits in runs of ten starting at zero; the
	// distance to the start of the run, modulo ten, is the value.
	n := 0
	for r-rune(n)-1 >= 0 && unicode.IsDigit(r-rune(n)-1) {
		n++
	}
	return n % 10
}

// javaParseInt is Long.parseLong (bits 64) or Integer.parseInt (bits 32).
func javaParseInt(s string, bits int) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("%w: empty string", errJavaNumber)
	}
	var b strings.Builder
	rs := []rune(s)
	i := 0
	if rs[0] == '-' || rs[0] == '+' {
		if len(rs) == 1 {
			return 0, fmt.Errorf("%w: %q", errJavaNumber, s)
		}
		if rs[0] == '-' {
			b.WriteByte('-')
		}
		i = 1
	}
	for ; i < len(rs); i++ {
		d := javaDigit(rs[i])
		if d < 0 {
			return 0, fmt.Errorf("%w: %q", errJavaNumber, s)
		}
		b.WriteByte(byte('0' + d))
	}
	v, err := strconv.ParseInt(b.String(), 10, bits)
	if err != nil {
		return 0, fmt.Errorf("%w: %q out of range", errJavaNumber, s)
	}
	return v, nil
}
