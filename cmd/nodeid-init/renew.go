package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nodeid/nodeid/clock"
	"github.com/nodeid/nodeid/nodeid"
)

// cmdRenew is the essential ECS sidecar: adopt the hand-off written by
// `acquire`, renew until SIGTERM (then release), exit 3 on loss so ECS
// stops the task.
func cmdRenew(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	names := append([]string{"handoff-file", "env-file", "lease-file"}, leaseOptions...)
	s, rest, err := parseSettings(ctx, "renew", args, stdout, names, nil)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("unexpected arguments %q", rest)
	}
	if s.handoffFile == "" && s.envFile != "" {
		s.handoffFile = defaultHandoff(s.envFile)
	}
	if s.handoffFile == "" {
		return usagef("no hand-off file: set --handoff-file or NODEID_HANDOFF_FILE")
	}
	b, err := os.ReadFile(s.handoffFile)
	if err != nil {
		return usagef("hand-off file: %v", err)
	}
	var h nodeid.Handoff
	if err := json.Unmarshal(b, &h); err != nil {
		return usagef("hand-off file %s: %v", s.handoffFile, err)
	}
	if s.taskID == "" {
		s.taskID = h.TaskID // the hand-off names the task that acquired it
	}
	if s.clusterSize == 0 {
		s.clusterSize = h.ClusterSize
	}
	if s.leaseFile != "" {
		if err := checkWritableFile("lease file", s.leaseFile); err != nil {
			return err
		}
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, stopSignals...)
	defer signal.Stop(notifyPassSignals()) // taken and dropped: they must not kill the sidecar
	defer signal.Stop(sigs)
	held, err := openOutputs(s, outputFile{"lease file", s.leaseFile})
	if err != nil {
		return err
	}
	sess, err := newSession(ctx, s, stderr)
	if err != nil {
		closeHeld(held...)
		return err
	}
	sess.leaseFile, sess.leaseOut = s.leaseFile, held[0]
	defer sess.logw.Close(logFlushTimeout)
	defer sess.awaitLossHandled()
	defer sess.closeOutputs()
	p := sess.provider
	inst, err := p.Adopt(ctx, h)
	if err != nil {
		return err
	}
	invocationOf(ctx).beginTenure()
	sess.tenureLog(inst).Info("renewing adopted lease")
	go sess.followPeers(ctx, "", nil) // for the metric
	select {
	case err := <-sess.lost:
		return sess.lossExit(err)
	case <-p.Done():
		// Ended without OnLost (yet): its lease-file write may hang. The
		// deferred awaitLossHandled bounds the wait from the loss.
		if lerr := sess.lossErr(); lerr != nil {
			return sess.lossExit(lerr)
		}
		return p.Err()
	case sig := <-sigs:
		sess.log.Info("releasing on signal", "signal", sig.String())
		sess.beginRelease() // never a release after a hang, nor with a write in flight
		cctx, cancel := sess.releaseContext()
		defer cancel()
		if err := p.Close(cctx); err != nil {
			return fmt.Errorf("release: %w", err)
		}
		return nil
	}
}

func defaultHandoff(envFile string) string {
	return filepathJoinDir(envFile, "nodeid-handoff.json")
}

func filepathJoinDir(file, name string) string { return filepath.Join(filepath.Dir(file), name) }

func boottimeNow() time.Duration { return clock.SystemBoottime() }

// signalContext is cancelled by SIGTERM or SIGINT.
func signalContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
}
