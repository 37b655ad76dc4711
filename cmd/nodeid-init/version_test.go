package main

import (
	"bytes"
	"context"
	"runtime"
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
