package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

// FuzzParseIDList: allowed-ID lists parse without panics into sorted,
// distinct, non-negative IDs.
func FuzzParseIDList(f *testing.F) {
	for _, s := range []string{"0,2,4", "0-5", "1, 3-4 ,9", "5-1", "x", "-1", "0-99999999999", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids, err := parseIDList(s)
		if err != nil {
			return
		}
		for i, id := range ids {
			if id < 0 || (i > 0 && ids[i-1] >= id) {
				t.Fatalf("parseIDList(%q) = %v", s, ids)
			}
		}
	})
}

// FuzzSettings: any value of any variable or flag gives settings or one
// usage error, never a panic.
func FuzzSettings(f *testing.F) {
	f.Add("lease-duration", "15s")
	f.Add("cluster-size", "-1")
	f.Add("allowed-ids", "0-3,7")
	f.Add("bucket", "My_Bucket")
	f.Add("metrics-addr", ":9600")
	f.Add("log-level", "verbose")
	f.Add("renew-interval", "1h")
	f.Fuzz(func(t *testing.T, name, value string) {
		if strings.ContainsAny(name, "= \x00") || strings.HasPrefix(name, "-") {
			return
		}
		names := make([]string, 0, len(options))
		for _, o := range options {
			names = append(names, o.flag)
		}
		s, _, err := parseSettings(context.Background(), "run", []string{"--" + name + "=" + value}, io.Discard, names, nil)
		var ue *usageError
		switch {
		case err == nil:
			if _, err := s.providerConfig(s.logger(io.Discard)); err != nil && !errors.As(err, &ue) {
				t.Fatalf("provider configuration error is not a usage error: %v", err)
			}
		case !errors.As(err, &ue):
			t.Fatalf("--%s=%q: %v is not a usage error", name, value, err)
		case strings.Contains(err.Error(), "\n"):
			t.Fatalf("error of more than one line: %q", err)
		}
	})
}
