package versitygw

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// EnvSkip names the variable that opts out of every test that needs
// VersityGW (NODEID_SKIP_INTEGRATION=1). It is the only way such a test
// skips, and it is ignored under CI.
const EnvSkip = "NODEID_SKIP_INTEGRATION"

// installTimeout bounds `go install` (about 90 s on a quiet machine).
const installTimeout = 10 * time.Minute

var forTest struct {
	once      sync.Once
	bin, skip string
	err       error

	mu      sync.Mutex
	skipped []string
}

// ForTest returns the binary for a test that needs VersityGW: found as Find
// finds it, or else installed (Install, once per machine at a time). skip is
// set instead when the tests were opted out with NODEID_SKIP_INTEGRATION and
// CI is not set; a test that cannot have the binary otherwise fails: a
// missing server must not turn into a green run.
func ForTest() (bin, skip string, err error) {
	forTest.once.Do(func() {
		forTest.bin, forTest.skip, forTest.err = policy(truthy(os.Getenv("CI")), truthy(os.Getenv(EnvSkip)), Find, install)
	})
	return forTest.bin, forTest.skip, forTest.err
}

// policy decides ForTest's answer; find and install are replaced in tests.
func policy(ci, optOut bool, find func() (string, error), install func() error) (bin, skip string, err error) {
	if optOut && !ci {
		return "", fmt.Sprintf("SKIPPED: needs VersityGW, and %s is set", EnvSkip), nil
	}
	bin, err = find()
	if !errors.Is(err, ErrNotInstalled) {
		return bin, "", err
	}
	if ierr := install(); ierr != nil {
		return "", "", fmt.Errorf("versitygw is not installed and installing it failed: %w (run `make versitygw`, or set %s=1 to skip the integration tests)", ierr, EnvSkip)
	}
	bin, err = find()
	return bin, "", err
}

// NoteSkip records that the named test skipped for want of VersityGW, for
// SkipSummary.
func NoteSkip(name string) {
	forTest.mu.Lock()
	defer forTest.mu.Unlock()
	forTest.skipped = append(forTest.skipped, name)
}

// SkipSummary is one line naming the tests NoteSkip recorded, or "" when
// none skipped. TestMain prints it, so an opted-out run says what it left out.
func SkipSummary() string {
	forTest.mu.Lock()
	defer forTest.mu.Unlock()
	if len(forTest.skipped) == 0 {
		return ""
	}
	names := append([]string(nil), forTest.skipped...)
	sort.Strings(names)
	return fmt.Sprintf("SKIPPED %d tests that need VersityGW (%s is set): %s", len(names), EnvSkip, strings.Join(names, " "))
}

// truthy reads a boolean environment variable: anything but empty, "0" and
// "false" counts, as CI systems set CI=true or CI=1.
func truthy(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "0", "false":
		return false
	}
	return true
}

// install runs Install, serialised by a lock file so the test binaries of
// several packages do not install at once; a binary installed while we
// waited is used as it is.
func install() error {
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "nodeid-versitygw-install.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := Find(); err == nil {
		return nil
	}
	fmt.Fprintf(os.Stderr, "versitygw: not found; running %s (about 90 s)\n", Install)
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	args := strings.Fields(Install)
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", Install, err, strings.TrimSpace(string(out)))
	}
	return nil
}
