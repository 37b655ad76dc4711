package main_test

// From adversarial review rev19: invariant 4, "bad input gets one error line
// and exit 2 before anything is written".

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Schedule: `nodeid-init run -- true` without --lease-file and with a bad
// setting that is only checked after the default lease file is chosen (no
// bucket, no cluster size, a missing data root). cmdRun calls
// defaultLeaseFile(), which os.MkdirTemp's a new nodeid-* directory in
// $TMPDIR, before checkWritableFile(peers file), checkTemplates and
// newSession's checks. The run exits 2 with one line, but a directory was
// written, and it is never removed (one more per failed restart of a
// misconfigured task).
func TestBadInputOfRunLeavesNothingInTMPDIR(t *testing.T) {
	cases := []struct {
		name string
		env  []string
	}{
		{"missing bucket", []string{"NODEID_CLUSTER_SIZE=1"}},
		{"missing cluster size", []string{"NODEID_BUCKET=some-bucket"}},
		{"missing data root", []string{"NODEID_BUCKET=some-bucket", "NODEID_CLUSTER_SIZE=1", "NODEID_DATA_ROOT=/nonexistent/root"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			cmd := exec.Command(binary, "run", "--", "true")
			cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "TMPDIR=" + tmp,
				"NODEID_TASK_ID=bad-input", "AWS_CONFIG_FILE=/nonexistent", "AWS_SHARED_CREDENTIALS_FILE=/nonexistent"}, tc.env...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			}
			lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
			if code != 2 || len(lines) != 1 {
				t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
			}
			entries, err := os.ReadDir(tmp)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 0 {
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				t.Errorf("bad input (%s) wrote to $TMPDIR: %v", strings.TrimSpace(stderr.String()), names)
			}
		})
	}
}
