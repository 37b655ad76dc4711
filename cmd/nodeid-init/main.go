// Command nodeid-init gives an ECS task a stable node ID: as a supervisor
// that runs the broker (run), as an init container (acquire) with a sidecar
// that keeps the lease (renew), and as the operator's tool (status,
// bootstrap, scale, release, probe, health). See docs/cli.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nodeid/nodeid/nodeid"
)

// Exit codes; documented in docs/cli.md and relied on by the tests.
const (
	exitOK             = 0
	exitError          = 1 // any other error
	exitUsage          = 2 // invalid usage or configuration
	exitLeaseLost      = nodeid.ExitCodeLeaseLost
	exitNotEnforced    = 4 // the endpoint does not enforce conditional writes
	exitAcquireTimeout = 5 // no node ID acquired before the acquire timeout
	exitDataRefused    = 6 // the data root refused this lease's version or cluster
	exitFSHung         = 7 // the data root did not answer within --fs-timeout; the lease is left to expire
)

// usageError is bad input: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// exitError carries an explicit exit code (a child's, in run mode).
type codeError struct {
	code int
	err  error
}

func (e *codeError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit code %d", e.code)
	}
	return e.err.Error()
}

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"run", "acquire a node ID, prepare its data directory, run CMD and renew while it runs", cmdRun},
		{"acquire", "ECS init container: acquire, prepare, write the env file and a hand-off, exit", cmdAcquire},
		{"renew", "ECS sidecar: adopt the hand-off and renew until SIGTERM; exit 3 on loss", cmdRenew},
		{"status", "show every node ID's lease and why it can or cannot be taken (--check: for alerting)", cmdStatus},
		{"peers", "show every node ID's holder and address", cmdPeers},
		{"bootstrap", "create the lease objects of a new cluster", cmdBootstrap},
		{"scale", "grow or shrink the cluster (IDs are never deleted)", cmdScale},
		{"release", "force-release a node ID whose holder is known to be dead", cmdRelease},
		{"probe", "check that the endpoint enforces conditional writes", cmdProbe},
		{"health", "exit 0 when this task's lease is valid, or it waits for a node ID (ECS health check)", cmdHealth},
		{"version", "print the version, commit and Go version (also --version)", cmdVersion},
	}
}

func main() {
	// For the whole process, never stopped: Go kills a program that writes
	// to a closed stdout or stderr unless SIGPIPE is notified, and the final
	// error line comes after every command's own signal handling ended.
	// Notified, not ignored: an ignored disposition would pass to CMD.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	// Job control never stops nodeid-init: CMD runs in a session of its own,
	// so a Ctrl-Z or a background write to a terminal would stop the
	// renewals and the watchdog while CMD writes on (review r26g).
	// SIGTSTP and SIGTTIN are notified (CMD gets the default back at
	// exec). SIGTTOU must be ignored: a caught one makes the kernel restart
	// the terminal write for ever; CMD inherits it ignored (docs/cli.md).
	signal.Notify(make(chan os.Signal, 1), syscall.SIGTSTP, syscall.SIGTTIN)
	signal.Ignore(syscall.SIGTTOU)
	code := realMain(context.Background(), os.Args[1:], os.Stdout, os.Stderr)
	awaitHangExit() // a hang's exit code is 7, whatever returned first
	os.Exit(code)
}

// invocation is what realMain learns from the command as it parses its
// settings: the log format its final error line must follow.
type invocation struct {
	mu        sync.Mutex
	logFormat string
	stderr    io.Writer // for the warnings of parseSettings
	settings  *settings // once parsed: names the settings in errors
	tenure    bool      // a lease was held: storage errors are no longer configuration's
}

type invocationKey struct{}

func invocationOf(ctx context.Context) *invocation {
	if inv, ok := ctx.Value(invocationKey{}).(*invocation); ok {
		return inv
	}
	return &invocation{}
}

func (inv *invocation) setLogFormat(f string) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.logFormat = f
}

func (inv *invocation) setSettings(s *settings) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.settings = s
}

func (inv *invocation) settingsOf() *settings {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return inv.settings
}

// beginTenure is called once a lease is held (acquired or adopted).
func (inv *invocation) beginTenure() {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.tenure = true
}

func (inv *invocation) inTenure() bool {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return inv.tenure
}

func (inv *invocation) json() bool {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return inv.logFormat == "json"
}

func realMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printUsage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help":
		printUsage(stdout)
		return exitOK
	case "help":
		if len(args) == 1 {
			printUsage(stdout)
			return exitOK
		}
		args = []string{args[1], "-h"} // help CMD = CMD -h
	case "--version", "-version":
		args = append([]string{"version"}, args[1:]...)
	}
	// Until the command has read its settings (a bad flag ends it before),
	// the variable decides the format of the final error line.
	inv := &invocation{logFormat: strings.TrimSpace(os.Getenv("NODEID_LOG_FORMAT")), stderr: stderr}
	ctx = context.WithValue(ctx, invocationKey{}, inv)
	for _, c := range commands() {
		if c.name == args[0] {
			err := classifyExit(inv, c.run(ctx, args[1:], stdout, stderr))
			code := exitCode(err)
			if err != nil && !errors.Is(err, errHelp) {
				var ce *codeError
				if !errors.As(err, &ce) || ce.err != nil {
					printError(stderr, inv.json(), c.name, oneLine(err), code)
				}
			}
			return code
		}
	}
	fmt.Fprintf(stderr, "nodeid-init: unknown command %q (see nodeid-init help)\n", args[0])
	return exitUsage
}

// printError writes the final error line: "nodeid-init CMD: message", or,
// with --log-format json, the same text as a JSON record at level ERROR, so
// that every line of the process parses as JSON.
func printError(w io.Writer, asJSON bool, cmd, msg string, code int) {
	text := fmt.Sprintf("nodeid-init %s: %s", cmd, msg)
	if !asJSON {
		writeBounded(w, text)
		return
	}
	b, _ := json.Marshal(struct {
		Time     string `json:"time"`
		Level    string `json:"level"`
		Msg      string `json:"msg"`
		ExitCode int    `json:"exit_code"`
	}{time.Now().Format(time.RFC3339Nano), "ERROR", text, code})
	writeBounded(w, string(b))
}

// exitCode maps an error to the documented exit codes.
func exitCode(err error) int {
	var ce *codeError
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, errHelp):
		return exitOK
	case errors.As(err, &ce):
		return ce.code
	case errors.As(err, &ue), errors.Is(err, nodeid.ErrInvalidConfig), errors.Is(err, nodeid.ErrAccessDenied),
		errors.Is(err, nodeid.ErrWrongEndpoint), nodeid.IsNoSuchBucket(err):
		return exitUsage
	case errors.Is(err, nodeid.ErrConditionalWritesNotEnforced):
		return exitNotEnforced
	case errors.Is(err, nodeid.ErrAcquireTimeout):
		return exitAcquireTimeout
	case errors.Is(err, nodeid.ErrLeaseLost):
		return exitLeaseLost
	case isDataRefusal(err):
		return exitDataRefused
	}
	return exitError
}

func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: nodeid-init COMMAND [flags]   (flags also come from NODEID_* variables; see docs/cli.md)")
	fmt.Fprintln(w, "       nodeid-init help COMMAND      (or nodeid-init COMMAND -h: the command's flags)")
	fmt.Fprintln(w, "       nodeid-init --version")
	fmt.Fprintln(w)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "exit codes: 0 ok, 1 error, 2 usage or configuration, 3 lease lost,")
	fmt.Fprintln(w, "            4 endpoint ignores conditional writes, 5 acquire timeout, 6 data root refused;")
	fmt.Fprintln(w, "            run passes the child's code through")
}
