package supervise

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cbc-otel/cbc-otel/tap"
)

// ForwardedSignals are passed on to the child. SIGINT, SIGTERM, SIGHUP and
// SIGQUIT also ask the wrapper to stop (SIGKILL after --kill-timeout).
var ForwardedSignals = []os.Signal{
	syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH,
}

// NotifySignals subscribes to the forwarded signals, and to SIGPIPE on a
// channel of its own that nobody reads. Notify (not Ignore) for SIGPIPE: an
// ignored disposition would be inherited by the child across exec, and the
// child must die of SIGPIPE as it would without us. Being notified, the
// runtime no longer kills us on EPIPE on stdout; the pump sees the error.
func NotifySignals() (<-chan os.Signal, func()) {
	c := make(chan os.Signal, 16)
	signal.Notify(c, ForwardedSignals...)
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	return c, func() {
		signal.Stop(c)
		signal.Stop(pipe)
	}
}

// StopWithParent sends us SIGTERM when our parent process exits, which the
// supervisor forwards to the child (then SIGKILL after the kill timeout),
// until ctx ends. It watches the process, not the thread that forked us
// (WatchParent): a caller's short-lived thread ending must not
// stop the run.
func StopWithParent(ctx context.Context, log *slog.Logger) {
	gone, how := WatchParent(ctx, 0)
	log.Debug("watching the parent process", "how", how)
	go func() {
		select {
		case <-gone:
			log.Info("parent process exited: stopping as on SIGTERM")
			if err := unix.Kill(os.Getpid(), unix.SIGTERM); err != nil {
				log.Error("parent process exited, cannot signal self", "err", err)
			}
		case <-ctx.Done():
		}
	}()
}

// consumerNice is the nice value of the telemetry consumer's thread.
const consumerNice = 10

// YieldToPassthrough locks the calling goroutine (the telemetry consumer) to
// its own OS thread and lowers that thread's priority. On a busy machine the
// kernel then gives the CPU to the child and the pumps first: the consumer
// takes what is left and, when it falls behind, the tap drops and counts
// rather than the passthrough slowing down. The thread ends with the
// goroutine (it stays locked), so no lowered thread returns to the pool.
func YieldToPassthrough() error {
	runtime.LockOSThread()
	return syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), consumerNice)
}

// YieldWhenBehind has the goroutine that merges the taps (the telemetry
// consumer) YieldToPassthrough once it first falls behind a burst (a queue
// filled past an eighth: tap.Tap.OnBehind), and not before. The locked,
// niced thread is what keeps a busy consumer from slowing the passthrough
// down, but each wake-up of a goroutine locked to its thread costs two
// thread hand-overs more: with a paced child, whose lines never fill the
// queue, it cost 12 % of the wrapper's CPU per line (`run` at 200 and
// 2,000 lines/s, telemetry on). Call it before the consumer starts.
func YieldWhenBehind(log *slog.Logger, taps ...*tap.Tap) {
	yield := func() {
		if err := YieldToPassthrough(); err != nil {
			log.Debug("lowering the telemetry consumer's priority", "err", err)
		}
		log.Debug("the telemetry consumer fell behind: it now yields to the passthrough (own thread, nice)", "nice", consumerNice)
	}
	for _, t := range taps {
		if t != nil {
			t.OnBehind(yield)
		}
	}
}
