// Package pacegen holds the paced children of the benchmark harness: the
// harness binary re-executes itself as the child that feeds a wrapped
// command's stdout at a fixed line rate, selected by an environment
// variable (EnvCPUGen, EnvLatGen) that its main checks first. The latency
// section also writes the probe lines (StampLine, at the pace of Pace) into
// a command's stdin itself, so the line format and the pacing live here once.
package pacegen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// EnvCPUGen makes the harness binary the paced child of the cpu run case:
// "RATE:PATH" writes PATH's lines to stdout at RATE lines/s, one write per
// line, as a CLI does.
const EnvCPUGen = "CBC_BENCH_CPUGEN"

// CPUGenMain is the paced child of the cpu section's run case: spec is "RATE:PATH". It
// writes PATH's lines to stdout, one write per line, at RATE lines/s (every
// millisecond the lines then due), so the wrapper sees a CLI's writes and
// its tap is not asked for more than it can take.
func CPUGenMain(spec string) int {
	r, path, _ := strings.Cut(spec, ":")
	rate, err := strconv.Atoi(r)
	if err != nil || rate <= 0 {
		fmt.Fprintf(os.Stderr, "cpu generator: bad rate in %q\n", spec)
		return 2
	}
	data, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cpu generator:", err)
		return 1
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	for sent, off := int64(0), 0; off < len(data); {
		due := int64(time.Since(start)) * int64(rate) / int64(time.Second)
		for ; sent < due && off < len(data); sent++ {
			end := len(data)
			if n := bytes.IndexByte(data[off:], '\n'); n >= 0 {
				end = off + n + 1
			}
			if _, err := os.Stdout.Write(data[off:end]); err != nil {
				fmt.Fprintln(os.Stderr, "cpu generator:", err)
				return 1
			}
			off = end
		}
		if off < len(data) {
			<-tick.C
		}
	}
	return 0
}

// StampField precedes the send time (wall clock, Unix ns, 19 digits) in
// every latency line. The wall clock, not a monotonic one, because in the
// stdout cases the sender is another process; both sides read the same
// CLOCK_REALTIME of this machine.
const StampField = `"t":`

// EnvLatGen makes the harness binary a line generator (the child of the
// stdout cases): "RATE:DURATION". It writes a warm-up line, waits for one
// byte on stdin, then writes stamped lines at RATE for DURATION.
const EnvLatGen = "CBC_BENCH_LATGEN"

// LatencyCycle is how many lines one probe task takes: a task_started,
// task_progress lines, a task_notification. Every cycle ends a plain task,
// which the wrapper exports as a span at once (no grace window): at 10k
// lines/s, 200 spans/s.
const LatencyCycle = 50

// StampLine appends to buf the line seq of the probe stream, stamped with
// the time it is written: seq −1 is the warm-up line (an init), then cycles
// of LatencyCycle lines, each a plain task from task_started to
// task_notification, so that the wrapper does its whole work on them
// (Tracker, a span per task, metrics).
func StampLine(buf []byte, seq int) []byte {
	now := time.Now().UnixNano()
	if seq < 0 {
		return fmt.Appendf(buf[:0], `{"type":"system","subtype":"init","session_id":"bench","seq":%d,%s%019d,"description":"%s"}`+"\n",
			seq, StampField, now, latencyPad)
	}
	task := seq / LatencyCycle
	switch seq % LatencyCycle {
	case 0:
		return fmt.Appendf(buf[:0], `{"type":"system","subtype":"task_started","task_id":"lat-%d","task_type":"local_agent","session_id":"bench","seq":%d,%s%019d,"description":"%s"}`+"\n",
			task, seq, StampField, now, latencyPad)
	case LatencyCycle - 1:
		return fmt.Appendf(buf[:0], `{"type":"system","subtype":"task_notification","task_id":"lat-%d","status":"completed","session_id":"bench","seq":%d,%s%019d,"usage":{"total_tokens":%d,"tool_uses":1,"duration_ms":%d}}`+"\n",
			task, seq, StampField, now, 1000+task%997, LatencyCycle)
	default:
		return fmt.Appendf(buf[:0], `{"type":"system","subtype":"task_progress","task_id":"lat-%d","session_id":"bench","seq":%d,%s%019d,"usage":{"total_tokens":%d,"tool_uses":1,"duration_ms":%d},"description":"%s"}`+"\n",
			task, seq, StampField, now, 10*(seq%LatencyCycle), seq%LatencyCycle, latencyPad[:32])
	}
}

// latencyPad pads the probe lines to about 200 bytes, a small event's size.
var latencyPad = strings.Repeat("x", 64)

// Pace calls write for seq 0..total-1 at rate per second: every
// millisecond, the lines that are due.
func Pace(ctx context.Context, rate int, dur time.Duration, write func(seq int) error) error {
	total := int(int64(rate) * int64(dur) / int64(time.Second))
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	for sent := 0; sent < total; {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		due := min(total, int(int64(time.Since(start))*int64(rate)/int64(time.Second)))
		for ; sent < due; sent++ {
			if err := write(sent); err != nil {
				return fmt.Errorf("write: %w", err)
			}
		}
	}
	return nil
}

// LatencyGenMain is the generator child of the latency section's stdout
// cases: spec is "RATE:DURATION".
func LatencyGenMain(spec string) int {
	r, d, _ := strings.Cut(spec, ":")
	rate, err1 := strconv.Atoi(r)
	dur, err2 := time.ParseDuration(d)
	if err := errors.Join(err1, err2); err != nil {
		fmt.Fprintln(os.Stderr, "latency generator:", err)
		return 2
	}
	out := os.Stdout
	buf := make([]byte, 0, 256)
	if _, err := out.Write(StampLine(buf, -1)); err != nil {
		return 1
	}
	// The reader has the warm-up line: start.
	if _, err := os.Stdin.Read(make([]byte, 1)); err != nil {
		fmt.Fprintln(os.Stderr, "latency generator: no go-ahead:", err)
		return 1
	}
	err := Pace(context.Background(), rate, dur, func(seq int) error {
		buf = StampLine(buf, seq)
		_, err := out.Write(buf)
		return err
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "latency generator:", err)
		return 1
	}
	return 0
}
