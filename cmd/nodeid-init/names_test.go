package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// One rule names every variable: --foo-bar is NODEID_FOO_BAR. The old names
// kept as aliases break it, and must not collide with another option.
func TestOptionNamesFollowOneRule(t *testing.T) {
	flags := map[string]bool{}
	for _, o := range options {
		if o.env != envName(o.flag) {
			t.Errorf("--%s reads %s, want %s", o.flag, o.env, envName(o.flag))
		}
		flags[o.flag] = true
	}
	for opt, old := range oldNames {
		if !flags[opt] {
			t.Errorf("old names of %q, which is no option", opt)
		}
		if flags[old.flag] || (old.env != "" && old.env == envName(opt)) {
			t.Errorf("old name %+v of --%s is a current name", old, opt)
		}
	}
}

func TestOldNamesAreAliasesAndMustAgree(t *testing.T) {
	dir := t.TempDir()
	good := writeTemplate(t, dir, "good.tmpl", "{{.NodeID}}")
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	names := []string{"s3-endpoint", "s3-region", "template"}
	parse := func(args ...string) (*settings, error) {
		s, _, err := parseSettings(context.Background(), "run", args, io.Discard, names, nil)
		return s, err
	}
	t.Run("old flags", func(t *testing.T) {
		s, err := parse("--endpoint", "http://127.0.0.1:7070", "--region", "eu-west-1")
		if err != nil || s.endpoint != "http://127.0.0.1:7070" || s.region != "eu-west-1" || s.sources["s3-region"] != "--region" {
			t.Fatalf("%+v %v", s, err)
		}
		if !s.explicit["s3-region"] {
			t.Errorf("--region does not count as --s3-region given on the command line")
		}
	})
	t.Run("old variable", func(t *testing.T) {
		t.Setenv("NODEID_TEMPLATES", good+":"+a)
		s, err := parse()
		if err != nil || len(s.templates) != 1 || s.templates[0].dst != a || s.sources["template"] != "NODEID_TEMPLATES" {
			t.Fatalf("%+v %v", s, err)
		}
		t.Setenv("NODEID_TEMPLATE", good+":"+a)
		if s, err = parse(); err != nil || s.sources["template"] != "NODEID_TEMPLATE" {
			t.Fatalf("both names, same value: %+v %v", s, err)
		}
	})
	t.Run("the flag wins over either variable", func(t *testing.T) {
		t.Setenv("NODEID_S3_REGION", "us-east-1")
		s, err := parse("--region", "eu-west-1")
		if err != nil || s.region != "eu-west-1" {
			t.Fatalf("%+v %v", s, err)
		}
	})
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"variables disagree", map[string]string{"NODEID_TEMPLATE": good + ":" + a, "NODEID_TEMPLATES": good + ":" + b}, nil, "NODEID_TEMPLATE=" + `"` + good + ":" + a + `" and its old name NODEID_TEMPLATES`},
		{"flags disagree", nil, []string{"--s3-region", "eu-west-1", "--region", "us-east-1"}, `--s3-region "eu-west-1" and its old name --region "us-east-1" disagree: set only --s3-region`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, err := parse(tc.args...)
			var ue *usageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want a usage error containing %q", err, tc.want)
			}
		})
	}
}

func TestUnknownVariablesNameTheClosest(t *testing.T) {
	got := unknownVariables([]string{
		"NODEID_CLUSTERSIZE=3", "NODEID_BUCKET=b", "NODEID_ENDPOINT=http://x", "NODEID_REGION=eu-west-1",
		"NODEID_TEMPLATES=a:b", "NODEID_DATAROOT=/data", "NODEID_FROBNICATE=1", "NODEID_TEST_CLOCK_OFFSET=1s",
		"NODEID_SKIP_INTEGRATION=1", "HOME=/root", "NODEID_CLUSTERSIZE=4",
	})
	want := []string{
		"unknown variable NODEID_CLUSTERSIZE ignored; did you mean NODEID_CLUSTER_SIZE?",
		"unknown variable NODEID_DATAROOT ignored; did you mean NODEID_DATA_ROOT?",
		"unknown variable NODEID_ENDPOINT ignored; did you mean NODEID_S3_ENDPOINT?",
		"unknown variable NODEID_FROBNICATE ignored",
		"unknown variable NODEID_REGION ignored; did you mean NODEID_S3_REGION?",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The warning comes before the error it explains, in the log's format.
func TestUnknownVariableWarnedBeforeTheMissingSetting(t *testing.T) {
	t.Setenv("NODEID_BUCKET", "bucket")
	t.Setenv("NODEID_CLUSTER_SIZE", "")
	t.Setenv("NODEID_CLUSTERSIZE", "3")
	for _, format := range []string{"text", "json"} {
		t.Setenv("NODEID_LOG_FORMAT", format)
		var stdout, stderr bytes.Buffer
		code := realMain(context.Background(), []string{"run", "--", "true"}, &stdout, &stderr)
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		if code != exitUsage || len(lines) != 2 ||
			!strings.Contains(lines[0], "unknown variable NODEID_CLUSTERSIZE ignored; did you mean NODEID_CLUSTER_SIZE?") ||
			!strings.Contains(lines[1], "no cluster size") || (format == "json") != strings.HasPrefix(lines[0], "{") {
			t.Errorf("%s: exit %d:\n%s", format, code, stderr.String())
		}
	}
}
