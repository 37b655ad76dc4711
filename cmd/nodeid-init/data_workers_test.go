package main

import (
	"context"
	"errors"
	"io"
	"testing"
)

// TestDataWorkers: --data-workers and NODEID_DATA_WORKERS reach the
// settings, 32 by default, and values outside 1..1024 are usage errors.
func TestDataWorkers(t *testing.T) {
	names := append([]string{"bucket"}, dataOptions...)
	parse := func(args ...string) (*settings, error) {
		s, _, err := parseSettings(context.Background(), "run", append([]string{"--bucket=bkt"}, args...), io.Discard, names, nil)
		return s, err
	}
	for _, tc := range []struct {
		env  string
		args []string
		want int
	}{
		{"", nil, 32},
		{"", []string{"--data-workers=1"}, 1},
		{"8", nil, 8},
		{"8", []string{"--data-workers=1024"}, 1024},
	} {
		t.Setenv("NODEID_DATA_WORKERS", tc.env)
		s, err := parse(tc.args...)
		if err != nil || s.dataWorkers != tc.want {
			t.Errorf("env %q, args %v: workers %v, err %v; want %d", tc.env, tc.args, s, err, tc.want)
		}
	}
	t.Setenv("NODEID_DATA_WORKERS", "")
	for _, v := range []string{"0", "-1", "1025", "x", "1.5"} {
		var ue *usageError
		if _, err := parse("--data-workers=" + v); !errors.As(err, &ue) {
			t.Errorf("--data-workers=%s: err = %v, want a usage error", v, err)
		}
	}
}
