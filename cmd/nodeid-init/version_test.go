package main

import (
	"bytes"
	"context"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionCommandAndFlags(t *testing.T) {
	v, c := buildVersion()
	want := "nodeid-init " + v + " " + c + " (" + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
	for _, arg := range []string{"version", "--version", "-version"} {
		var stdout, stderr bytes.Buffer
		if code := realMain(context.Background(), []string{arg}, &stdout, &stderr); code != exitOK {
			t.Errorf("%s: exit %d", arg, code)
		}
		if stdout.String() != want || stderr.Len() != 0 {
			t.Errorf("%s: stdout %q, stderr %q; want stdout %q", arg, stdout.String(), stderr.String(), want)
		}
	}
}

func TestVCSRevisionFallback(t *testing.T) {
	for _, tc := range []struct {
		settings []debug.BuildSetting
		want     string
	}{
		{nil, ""},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "false"}}, "0123456789ab"},
		{[]debug.BuildSetting{{Key: "vcs.modified", Value: "true"}, {Key: "vcs.revision", Value: "0123456789abcdef0123"}}, "0123456789ab-dirty"},
		{[]debug.BuildSetting{{Key: "vcs.modified", Value: "true"}}, ""},
	} {
		if got := vcsRevision(&debug.BuildInfo{Settings: tc.settings}); got != tc.want {
			t.Errorf("vcsRevision(%v) = %q, want %q", tc.settings, got, tc.want)
		}
	}
}

func TestBuildInfoMetric(t *testing.T) {
	families, err := newMetrics().reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	v, c := buildVersion()
	want := map[string]string{"version": v, "commit": c, "goversion": runtime.Version()}
	for _, f := range families {
		if f.GetName() != "nodeid_build_info" {
			continue
		}
		if len(f.GetMetric()) != 1 {
			t.Fatalf("%d nodeid_build_info series, want 1", len(f.GetMetric()))
		}
		s := f.GetMetric()[0]
		if got := s.GetGauge().GetValue(); got != 1 {
			t.Errorf("nodeid_build_info = %v, want 1", got)
		}
		got := map[string]string{}
		for _, l := range s.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if len(got) != len(want) {
			t.Errorf("labels %v, want %v", got, want)
		}
		for k, w := range want {
			if got[k] != w || strings.TrimSpace(w) == "" {
				t.Errorf("label %s = %q, want %q (not empty)", k, got[k], w)
			}
		}
		return
	}
	t.Fatal("no nodeid_build_info series")
}
