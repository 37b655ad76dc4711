package s3test

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/nodeid/nodeid/internal/versitygw"
)

// shared is the package-wide gateway started lazily by StartVersity when
// the test binary runs under VersityMain.
var shared struct {
	sync.Mutex
	enabled bool
	gw      *versitygw.Gateway
	err     error // sticky start error, reported to every test
	skip    string
}

// VersityMain runs the tests of a package with one VersityGW process shared
// by all of them, started when the first test calls StartVersity and
// stopped after the last test, because starting it costs a noticeable
// fraction of a second. Each test still gets its own fresh bucket. Use it
// from TestMain:
//
//	func TestMain(m *testing.M) { s3test.VersityMain(m) }
//
// VersityMain does not return; it exits with the tests' status.
func VersityMain(m *testing.M) {
	shared.Lock()
	shared.enabled = true
	shared.Unlock()

	code := m.Run()
	if line := versitygw.SkipSummary(); line != "" {
		fmt.Fprintln(os.Stderr, line)
	}

	shared.Lock()
	if shared.gw != nil {
		shared.gw.Stop()
		os.RemoveAll(shared.gw.Dir)
		shared.gw = nil
	}
	shared.Unlock()
	os.Exit(code)
}

// StartVersity returns a VersityGW (posix backend on a temporary directory)
// on a loopback port with a fresh bucket. Under VersityMain the gateway is
// shared by the package's tests; otherwise each call starts its own process,
// stopped when the test ends.
//
// If the binary cannot be found it is installed; if that fails the test
// fails. The test skips only when NODEID_SKIP_INTEGRATION is set and CI is
// not (see versitygw.ForTest).
func StartVersity(t testing.TB) *Server {
	t.Helper()
	var gw *versitygw.Gateway
	shared.Lock()
	enabled := shared.enabled
	if enabled {
		if shared.gw == nil && shared.err == nil && shared.skip == "" {
			bin, skip, err := findVersity()
			switch {
			case err != nil:
				shared.err = err
			case skip != "":
				shared.skip = skip
			default:
				dir, err := os.MkdirTemp("", "s3test-versitygw-")
				if err != nil {
					shared.err = err
					break
				}
				shared.gw, shared.err = versitygw.Start(bin, dir)
				if shared.err != nil {
					os.RemoveAll(dir)
				}
			}
		}
		gw = shared.gw
		err, skip := shared.err, shared.skip
		shared.Unlock()
		if skip != "" {
			versitygw.NoteSkip(t.Name())
			t.Skip(skip)
		}
		if err != nil {
			t.Fatalf("s3test: %v", err)
		}
	} else {
		shared.Unlock()
		bin, skip, err := findVersity()
		if err != nil {
			t.Fatalf("s3test: %v", err)
		}
		if skip != "" {
			versitygw.NoteSkip(t.Name())
			t.Skip(skip)
		}
		gw, err = versitygw.Start(bin, t.TempDir())
		if err != nil {
			t.Fatalf("s3test: %v", err)
		}
		t.Cleanup(gw.Stop)
	}

	// Show what the gateway logged when a test fails: its errors are often
	// the only explanation of an unexpected answer.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("versitygw log (%s), last lines:\n%s", gw.LogPath, gw.Tail(40))
		}
	})

	s := &Server{
		Kind:      KindVersity,
		URL:       gw.URL,
		AccessKey: gw.AccessKey,
		SecretKey: gw.SecretKey,
		Region:    versitygw.Region,
	}
	s.Bucket = s.NewBucket(t)
	return s
}

// findVersity returns the path of the versitygw binary (installing it when
// missing), or a reason to skip (NODEID_SKIP_INTEGRATION), or an error.
func findVersity() (bin, skip string, err error) { return versitygw.ForTest() }
