package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nodeid/nodeid/nodeid"
)

// cmdAcquire is the ECS init container: acquire, prepare the data
// directory, write the env file and the hand-off, and exit 0. The lease is
// then kept by `renew` (or an embedded provider that adopts the hand-off);
// if nobody adopts it, it expires like a crashed holder's.
func cmdAcquire(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	names := append(append([]string{"env-file", "handoff-file", "lease-file"}, leaseOptions...), dataOptions...)
	s, rest, err := parseSettings(ctx, "acquire", args, stdout, names, nil)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("unexpected arguments %q", rest)
	}
	if s.envFile == "" {
		return usagef("no env file: set --env-file or NODEID_ENV_FILE")
	}
	if s.handoffFile == "" {
		s.handoffFile = defaultHandoff(s.envFile)
	}
	if err := checkWritableFile("env file", s.envFile); err != nil {
		return err
	}
	if err := checkWritableFile("hand-off file", s.handoffFile); err != nil {
		return err
	}
	if s.leaseFile != "" {
		// Written now and kept current by `renew`, which must be given the
		// same path; the broker finds it as NODE_LEASE_FILE.
		if err := checkWritableFile("lease file", s.leaseFile); err != nil {
			return err
		}
	}
	if err := checkDistinctOutputs(outputFile{"env file", s.envFile}, outputFile{"hand-off file", s.handoffFile}, outputFile{"lease file", s.leaseFile}); err != nil {
		return err
	}
	// Written after a wait for an ID that may be long: in the directories
	// opened now (heldfile.go).
	held, err := openOutputs(s, outputFile{"hand-off file", s.handoffFile}, outputFile{"env file", s.envFile}, outputFile{"lease file", s.leaseFile})
	if err != nil {
		return err
	}
	handoffOut, envOut := held[0], held[1]
	defer closeHeld(handoffOut, envOut)
	ctx, stop := stopContext(ctx)
	defer stop()
	sess, err := newSession(ctx, s, stderr)
	if err != nil {
		held[2].close()
		return err
	}
	sess.leaseFile, sess.leaseOut = s.leaseFile, held[2]
	sess.boundOutputs(handoffOut, envOut)
	defer sess.logw.Close(logFlushTimeout)
	defer sess.awaitLossHandled()
	defer sess.closeOutputs()
	defer sess.stopWaiting()
	p := sess.provider
	sess.writeWaiting(ctx)
	go sess.hintScaledUp(ctx)
	inst, err := p.Acquire(ctx)
	sess.setSpare(false)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			// Exit non-zero: ECS must not start the broker without an ID.
			return errors.New("stopped by a signal before a node ID was acquired")
		}
		return err
	}
	invocationOf(ctx).beginTenure()
	dataDir, err := sess.prepareDataDir(ctx, inst)
	if err != nil {
		if !errors.Is(err, nodeid.ErrLeaseLost) {
			sess.giveBack(false)
		}
		return err
	}
	env := sess.nodeEnv(inst, dataDir)
	env = append(env, "NODE_HANDOFF_FILE="+s.handoffFile)
	h, err := p.HandOff(ctx)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(h)
	if err := handoffOut.writeFile(append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("hand-off file: %w", err)
	}
	if err := envOut.writeFile(envFileText(env), 0o644); err != nil {
		return fmt.Errorf("env file: %w", err)
	}
	left := time.Duration(h.ValidUntilBoottimeNs) - boottimeNow()
	sess.tenureLog(inst).Info("node id acquired and handed off",
		"env_file", s.envFile, "handoff_file", s.handoffFile, "adopt_within_seconds", logSeconds(left))
	return nil
}

// envFileText renders NAME=value pairs for `set -a; . FILE`: every value is
// single-quoted, so that a task ID or a path with ; $ ` ' or spaces is data,
// never shell syntax. (checkPathText and ValidateTaskID keep newlines out.)
func envFileText(env []string) []byte {
	var b strings.Builder
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		b.WriteString(name + "=" + shellQuote(value) + "\n")
	}
	return []byte(b.String())
}

// shellQuote quotes s for sh: inside single quotes nothing is special; a
// single quote closes the quotes, is escaped with a backslash, and reopens.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
