package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// passthrough times, interleaved, on a mixed and on a task-heavy stream:
//
//	cat:  cat F > /dev/null                          (the floor)
//	pipe: cat F | cat > /dev/null                    (one pipe hop: the baseline)
//	run:  cbc-otel run [telemetry on] -- cat F > /dev/null
//
// Wall time gives throughput; user+system CPU of every process of a case
// (rusage of the processes waited for) is far less sensitive to other load.
func passthrough(ctx context.Context, c *config, rep *report) error {
	mixed, err := mixedFile(c, c.mixedMB)
	if err != nil {
		return err
	}
	tasks, err := taskFile(ctx, c, c.taskMB)
	if err != nil {
		return err
	}
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", os.DevNull, err)
	}
	defer devnull.Close()
	tdir := filepath.Join(c.work, "telemetry")
	if err := os.MkdirAll(tdir, 0o755); err != nil {
		return fmt.Errorf("telemetry dir: %w", err)
	}
	defer os.RemoveAll(tdir)

	for _, in := range []struct{ name, path string }{{"mixed", mixed}, {"task-heavy", tasks}} {
		size, err := fileSize(in.path)
		if err != nil {
			return err
		}
		if err := warm(in.path); err != nil {
			return err
		}
		cases := []string{"cat", "pipe", "run"}
		wall := map[string][]float64{}
		cpu := map[string][]float64{}
		var spans int64
		for i := range c.runs {
			for _, k := range cases {
				var cmd *exec.Cmd
				switch k {
				case "cat":
					cmd = exec.CommandContext(ctx, "cat", in.path)
				case "pipe":
					cmd = exec.CommandContext(ctx, "sh", "-c", `cat "$1" | cat`, "sh", in.path)
				case "run":
					tel, err := telemetryOn(c.names, tdir, fmt.Sprintf("pt-%s-%d", in.name, i))
					if err != nil {
						return err
					}
					cmd = exec.CommandContext(ctx, c.bin, append(append([]string{"run"}, tel...), "--", "cat", in.path)...)
				}
				cmd.Stdout, cmd.Stderr = devnull, os.Stderr
				m, err := timed(cmd)
				if err != nil {
					return err
				}
				wall[k] = append(wall[k], m.wall.Seconds())
				cpu[k] = append(cpu[k], m.cpu.Seconds())
			}
			// The telemetry must really have been on: the metrics file is
			// written at exit, and a task-heavy stream yields spans.
			tag := fmt.Sprintf("pt-%s-%d", in.name, i)
			if sz, err := fileSize(filepath.Join(tdir, tag+"-metrics.prom")); err != nil || sz == 0 {
				return fmt.Errorf("run wrote no metrics file (%s): telemetry was not on", tag)
			}
			if sz, err := fileSize(filepath.Join(tdir, tag+"-traces.jsonl")); err == nil {
				spans = sz
			}
			if in.name == "task-heavy" && spans == 0 {
				return fmt.Errorf("run wrote no spans on the task-heavy stream (%s)", tag)
			}
			os.Remove(filepath.Join(tdir, tag+"-traces.jsonl"))
		}
		sec := "passthrough " + in.name
		for _, k := range cases {
			mw := median(wall[k])
			rep.add(sec, fmt.Sprintf("%s: %.0f MiB, wall", k, mib(size)),
				fmt.Sprintf("%.3f s = %.0f MiB/s%s", mw, mib(size)/mw, spread(wall[k], "%.3f")))
			rep.add(sec, k+": CPU (user+sys, all processes)", fmt.Sprintf("%.3f s%s", median(cpu[k]), spread(cpu[k], "%.3f")))
		}
		ratio := median(wall["pipe"]) / median(wall["run"])
		rep.addTarget(sec, "throughput run/pipe", fmt.Sprintf("%.3f", ratio), "≥ 0.95", ratio >= 0.95)
		rep.add(sec, "throughput run/cat", fmt.Sprintf("%.3f", median(wall["cat"])/median(wall["run"])))
		rep.add(sec, "CPU run/pipe", fmt.Sprintf("%.2f", median(cpu["run"])/median(cpu["pipe"])))
		if in.name == "task-heavy" {
			rep.note("passthrough task-heavy: the last run wrote %d bytes of OTLP/JSON spans (telemetry on)", spans)
		}
	}
	rep.note("passthrough: `run` has telemetry fully on: /metrics on a loopback port, --traces.file (OTLP/JSON), --metrics.file and --summary.file at exit; no OTLP network exporter, no spool")
	return nil
}
