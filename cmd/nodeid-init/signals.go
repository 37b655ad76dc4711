package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// stopSignals start run's stop sequence: before CMD runs they stop the
// acquisition; once it runs the first one is forwarded to it as is (SIGQUIT
// is nginx's graceful stop), and after --stop-timeout the tree is killed.
var stopSignals = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT}

// passSignals are relayed to CMD's process group each time and change
// nothing else (a reload, a log reopen, a terminal resize). Without this,
// SIGHUP would kill nodeid-init at once and SIGUSR1/2 would be swallowed.
var passSignals = []os.Signal{syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH}

// notifyPassSignals takes passSignals and SIGPIPE from the runtime. SIGPIPE
// is taken so that a write to a closed stderr fails with EPIPE instead of
// killing nodeid-init while its tree runs; Notify, not Ignore, because an
// ignored signal would stay ignored in CMD after exec.
func notifyPassSignals() chan os.Signal {
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, append([]os.Signal{syscall.SIGPIPE}, passSignals...)...)
	return ch
}

// relaySignals forwards passSignals to CMD while it runs and drops them
// before it starts and after it is gone: a signal it has no handler for
// yet might kill it.
func (sess *session) relaySignals(ctx context.Context, ch <-chan os.Signal) {
	for {
		var sig os.Signal
		select {
		case <-ctx.Done():
			return
		case sig = <-ch:
		}
		if sig == syscall.SIGPIPE {
			continue
		}
		pid := int(sess.fence.pgid.Load())
		if pid == 0 {
			sess.log.Info("signal ignored: the command is not running", "signal", sig.String())
			continue
		}
		signalCommand(pid, sig.(syscall.Signal))
		sess.log.Info("signal forwarded to the command", "signal", sig.String())
	}
}

// stopContext is cancelled by a stop signal; passSignals and SIGPIPE are
// taken and dropped meanwhile (acquire holds a lease but runs no command).
func stopContext(ctx context.Context) (context.Context, context.CancelFunc) {
	pass := notifyPassSignals()
	ctx, stop := signal.NotifyContext(ctx, stopSignals...)
	return ctx, func() { stop(); signal.Stop(pass) }
}
