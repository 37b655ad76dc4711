package main

import (
	"strings"
	"testing"
	"time"
)

func TestTruncateWordsCutsAtAWordBoundary(t *testing.T) {
	s := "get e2e/4.json: corrupt lease object: invalid character 'g' looking for beginning of value"
	got := truncateWords(s, 60)
	if len(got) > 64 || !strings.HasSuffix(got, " ...") {
		t.Fatalf("%q", got)
	}
	kept := strings.TrimSuffix(got, " ...")
	if !strings.HasPrefix(s, kept) || s[len(kept)] != ' ' {
		t.Fatalf("cut inside a word: %q", got)
	}
	if truncateWords("short", 60) != "short" {
		t.Fatal("a short text was changed")
	}
}

func TestIDRanges(t *testing.T) {
	for in, want := range map[string]string{"": "", "3": "3", "0,1,2,5,7,8": "0-2,5,7-8"} {
		var ids []int
		for _, f := range strings.Split(in, ",") {
			if f != "" {
				ids = append(ids, int(f[0]-'0'))
			}
		}
		if got := idRanges(ids); got != want {
			t.Errorf("idRanges(%v) = %q, want %q", ids, got, want)
		}
	}
}

func TestBounds(t *testing.T) {
	var d time.Duration
	for _, tc := range []struct {
		v      string
		lo, hi time.Duration
		ok     bool
	}{
		{"1s", minLeaseDuration, maxLeaseDuration, true},
		{"999ms", minLeaseDuration, maxLeaseDuration, false},
		{"1h1s", minLeaseDuration, maxLeaseDuration, false},
		{"10ms", minInterval, maxLeaseDuration, false},
		{"100ms", minInterval, maxLeaseDuration, true},
		{"-1s", 0, 0, false},
		{"100h", 0, 0, true},
	} {
		if err := parseDurationIn(tc.v, tc.lo, tc.hi, &d); (err == nil) != tc.ok {
			t.Errorf("%s in [%v, %v]: %v", tc.v, tc.lo, tc.hi, err)
		}
	}
	for v, ok := range map[string]bool{"": true, "http://127.0.0.1:7070": true, "https://s3.eu-west-1.amazonaws.com": true,
		"127.0.0.1:7070": false, "s3.amazonaws.com": false, "ftp://x": false, "http://": false} {
		if err := checkEndpoint(v); (err == nil) != ok {
			t.Errorf("checkEndpoint(%q): %v", v, err)
		}
	}
}
