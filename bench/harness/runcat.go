package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cbc-otel/cbc-otel/bench/internal/pacegen"
)

// runCatTargetRatio is issue 33's bound: `run` with telemetry on costs at
// most twice `cat`'s CPU per line of the same paced stream.
const runCatTargetRatio = 2.0

// runCatRates are the paces of the section, lines/s, with how many lines
// each run writes: enough for /proc's 10 ms ticks to stay small next to the
// wrapper's figure (and a few seconds each).
var runCatRates = []struct {
	rate         int
	lines, quick int
}{
	{200, 1200, 200},
	{2000, 10000, 1000},
}

// runCatBin is one process measured side by side: cat, the current
// cbc-otel, a baseline cbc-otel.
type runCatBin struct {
	name string
	cat  bool
	bin  cpuBin
}

// runCat measures the CPU per line of `cat` and of `run` (telemetry on:
// /metrics listener, metrics file, traces file, summary) passing the same
// paced stream: the harness's paced child (pacegen, one write per line)
// writes the first lines of the task-heavy stream into `cat` through a
// pipe, or as `run`'s child. Every run of every process is paired with a
// run of the same process over an empty stream, its fixed cost (start-up
// and exit, reported on its own), which the paced figure is taken net of.
// The processes take turns within every run (cat, new, baseline), so a
// burst of load weighs on all of them.
func runCat(ctx context.Context, c *config, rep *report) error {
	catPath, err := exec.LookPath("cat")
	if err != nil {
		return fmt.Errorf("run vs cat: %w", err)
	}
	bins := []runCatBin{{name: "cat", cat: true}, {name: "run", bin: cpuBin{name: "new", path: c.bin, names: c.names}}}
	base, err := baselineBinary(ctx, c)
	if err != nil {
		return err
	}
	if base.path != "" {
		base.names = probeFlagNames(ctx, base.path)
		bins = append(bins, runCatBin{name: "run, baseline", bin: base})
		rep.note("runcat: baseline = %s, `%s` (%s), measured in turn with cat and the current binary in every run", base.desc, base.path, binVersion(ctx, base.path))
	}
	maxLines := 0
	for _, r := range runCatRates {
		maxLines = max(maxLines, r.lines)
	}
	// The section's stream is the start of the cpu section's: the same
	// task-heavy mix, cut to whole lines.
	full, err := taskFile(ctx, c, c.cpuRunMB)
	if err != nil {
		return err
	}
	dir := filepath.Join(c.work, "runcat")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("runcat dir: %w", err)
	}
	defer os.RemoveAll(dir)
	empty := filepath.Join(dir, "empty.ndjson")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		return fmt.Errorf("runcat: %w", err)
	}
	self, devnull, err := pacedChildIO()
	if err != nil {
		return err
	}
	defer devnull.Close()

	type input struct {
		rate  int
		path  string
		lines int64
	}
	var inputs []input
	for _, r := range runCatRates {
		n := r.lines
		if c.quick {
			n = r.quick
		}
		p := filepath.Join(dir, fmt.Sprintf("first-%d.ndjson", n))
		got, err := headLines(full, p, n)
		if err != nil {
			return err
		}
		if got < int64(n) {
			rep.note("runcat: the stream has only %d lines, %d asked for at %d lines/s", got, n, r.rate)
		}
		inputs = append(inputs, input{r.rate, p, got})
	}

	measure := func(b runCatBin, rate int, path string, lines int64, tag string) (cpuResult, error) {
		if b.cat {
			return catPaced(ctx, catPath, self, rate, path, lines, devnull)
		}
		return runPaced(ctx, b.bin, self, rate, path, lines, dir, tag, devnull)
	}
	// fixed[bin] and perLine[rate index][bin] collect the runs' figures
	// in µs.
	fixed := make([][]float64, len(bins))
	perLine := make([][][]float64, len(inputs))
	for i := range perLine {
		perLine[i] = make([][]float64, len(bins))
	}
	for run := range c.runs {
		for bi, b := range bins {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("interrupted: %w", err)
			}
			f, err := measure(b, 1000, empty, 0, fmt.Sprintf("fixed-%d-%d", run, bi))
			if err != nil {
				return fmt.Errorf("%s, empty stream: %w", b.name, err)
			}
			fixed[bi] = append(fixed[bi], float64(f.cpu.Microseconds()))
			for ri, in := range inputs {
				r, err := measure(b, in.rate, in.path, in.lines, fmt.Sprintf("paced-%d-%d-%d", run, bi, ri))
				if err != nil {
					return fmt.Errorf("%s at %d lines/s: %w", b.name, in.rate, err)
				}
				if r.invalid != "" {
					rep.note("runcat %s at %d lines/s, run %d: NOT counted: %s", b.name, in.rate, run+1, r.invalid)
					continue
				}
				net := float64((r.cpu - f.cpu).Microseconds()) / float64(in.lines)
				perLine[ri][bi] = append(perLine[ri][bi], net)
			}
		}
	}

	sec := "run vs cat"
	show := func(xs []float64, format, unit string) string {
		if len(xs) == 0 {
			return "no valid run (see notes)"
		}
		return fmt.Sprintf(format+" %s%s", median(xs), unit, spread(xs, format))
	}
	for bi, b := range bins {
		rep.add(sec, b.name+": fixed CPU of start-up and exit (empty stream)", show(fixed[bi], "%.0f", "µs"))
	}
	for ri, in := range inputs {
		name := fmt.Sprintf("%d lines/s (%d lines): CPU per line net of start-up", in.rate, in.lines)
		for bi, b := range bins {
			rep.add(sec, name+", "+b.name, show(perLine[ri][bi], "%.2f", "µs"))
		}
		cat, run := perLine[ri][0], perLine[ri][1]
		if len(cat) > 0 && len(run) > 0 && median(cat) > 0 {
			ratio := median(run) / median(cat)
			rep.addTarget(sec, name+": run / cat", fmt.Sprintf("%.1f", ratio), fmt.Sprintf("≤ %g", runCatTargetRatio), ratio <= runCatTargetRatio)
		}
		if len(bins) > 2 && len(run) > 0 && len(perLine[ri][2]) > 0 && median(perLine[ri][2]) > 0 {
			rep.add(sec, name+": run / baseline", fmt.Sprintf("%.2f", median(run)/median(perLine[ri][2])))
		}
	}
	rep.note("runcat: the harness itself (%s, pacegen's cpu generator) writes the first lines of the task-heavy stream, one write per line every 1 ms tick, into `cat > /dev/null` through a pipe, or as the child of `run` with telemetry on (/metrics listener, --metrics-file, --traces-file, --summary-file; stdout to /dev/null); cat's CPU is its rusage (µs), run's its rusage (µs, which includes the child it reaped) less the CPU the paced child reports for itself (getrusage at its end), so neither includes the writer. Per line = (CPU of the paced run − CPU of the same process over an empty stream, measured just before) / lines; a run of `run` counts only if the tap dropped nothing and every line was framed. %d runs, cat and the binaries in turn in each", envRunCatGen, c.runs)
	return nil
}

// envRunCatGen makes the harness binary the paced child of this section:
// "RATE:PATH:CPUFILE" is pacegen's cpu generator ("RATE:PATH") that then
// writes its own CPU (getrusage, µs) to CPUFILE, so that run's figure can
// be taken from its rusage (µs, which includes the child it reaped) rather
// than from /proc's 10 ms ticks.
const envRunCatGen = "CBC_BENCH_RUNCATGEN"

// runCatGenMain is the paced child of the section (envRunCatGen).
func runCatGenMain(spec string) int {
	i := strings.LastIndexByte(spec, ':')
	if i < 0 {
		fmt.Fprintf(os.Stderr, "runcat generator: bad spec %q\n", spec)
		return 2
	}
	if code := pacegen.CPUGenMain(spec[:i]); code != 0 {
		return code
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fmt.Fprintln(os.Stderr, "runcat generator:", err)
		return 1
	}
	us := (ru.Utime.Nano() + ru.Stime.Nano()) / 1e3
	if err := os.WriteFile(spec[i+1:], []byte(strconv.FormatInt(us, 10)), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "runcat generator:", err)
		return 1
	}
	return 0
}

// runPaced runs `BIN run [telemetry on] -- GEN`, GEN writing path at rate
// lines/s, and returns the wrapper's own CPU: its rusage (which includes
// the child it reaped) less the CPU the child reported. A run is invalid
// when the tap dropped or a line was not framed.
func runPaced(ctx context.Context, b cpuBin, self string, rate int, path string, lines int64, dir, tag string, out *os.File) (cpuResult, error) {
	tel, err := telemetryOn(b.names, dir, tag)
	if err != nil {
		return cpuResult{}, err
	}
	cpuFile := filepath.Join(dir, tag+"-gen-cpu")
	defer os.Remove(cpuFile)
	for _, f := range []string{"-traces.jsonl", "-metrics.prom", "-summary.json"} {
		defer os.Remove(filepath.Join(dir, tag+f))
	}
	cmd := exec.CommandContext(ctx, b.path, append(append([]string{"run"}, tel...), "--", self)...)
	cmd.Env = append(os.Environ(), envRunCatGen+"="+strconv.Itoa(rate)+":"+path+":"+cpuFile)
	cmd.Stdout, cmd.Stderr = out, os.Stderr
	if err := cmd.Run(); err != nil {
		return cpuResult{}, fmt.Errorf("%s: %w", cmd, err)
	}
	total := measuredOf(cmd, 0).cpu
	b2, err := os.ReadFile(cpuFile)
	if err != nil {
		return cpuResult{}, fmt.Errorf("the paced child reported no CPU: %w", err)
	}
	genUS, err := strconv.ParseInt(strings.TrimSpace(string(b2)), 10, 64)
	if err != nil {
		return cpuResult{}, fmt.Errorf("the paced child's CPU %q: %w", b2, err)
	}
	return checkedRun(cpuResult{cpu: total - time.Duration(genUS)*time.Microsecond, events: lines}, dir, tag, lines)
}

// catPaced runs `GEN | cat > /dev/null`, GEN writing path at rate lines/s,
// and returns cat's own CPU (its rusage: it has no children).
func catPaced(ctx context.Context, catPath, self string, rate int, path string, lines int64, out *os.File) (cpuResult, error) {
	gen := exec.CommandContext(ctx, self)
	gen.Env = append(os.Environ(), pacegen.EnvCPUGen+"="+strconv.Itoa(rate)+":"+path)
	gen.Stderr = os.Stderr
	cat := exec.CommandContext(ctx, catPath)
	cat.Stdout, cat.Stderr = out, os.Stderr
	if err := pipeline(gen, cat); err != nil {
		return cpuResult{}, fmt.Errorf("generator | cat: %w", err)
	}
	return cpuResult{cpu: measuredOf(cat, 0).cpu, events: lines}, nil
}

// pacedChildIO returns what a case with a paced child needs: the harness
// binary (the child) and /dev/null opened for writing (the wrapper's
// stdout), which the caller closes.
func pacedChildIO() (string, *os.File, error) {
	self, err := os.Executable()
	if err != nil {
		return "", nil, fmt.Errorf("the harness binary (paced child): %w", err)
	}
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return "", nil, fmt.Errorf("open %s: %w", os.DevNull, err)
	}
	return self, devnull, nil
}

// pipeline runs `src | dst` to completion: src's stdout is dst's stdin.
func pipeline(src, dst *exec.Cmd) error {
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("pipe: %w", err)
	}
	src.Stdout, dst.Stdin = pw, pr
	errS := src.Start()
	errD := dst.Start()
	// The children hold the pipe's ends now; ours must be closed, or dst
	// never sees the end of src's output.
	pr.Close()
	pw.Close()
	if errS == nil {
		errS = src.Wait()
	}
	if errD == nil {
		errD = dst.Wait()
	}
	return errors.Join(errS, errD)
}

// headLines writes the first n lines of src to dst (reused when present)
// and returns how many it holds.
func headLines(src, dst string, n int) (int64, error) {
	if b, err := os.ReadFile(dst); err == nil {
		return countLines(b), nil
	}
	in, err := os.Open(src)
	if err != nil {
		return 0, fmt.Errorf("runcat input: %w", err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return 0, fmt.Errorf("runcat input: %w", err)
	}
	r := bufio.NewReaderSize(in, 1<<20)
	w := bufio.NewWriter(out)
	var got int64
	for got < int64(n) {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			w.Write(line)
			got++
		}
		if err != nil {
			break
		}
	}
	if err := errors.Join(w.Flush(), out.Close()); err != nil {
		return 0, fmt.Errorf("runcat input: %w", err)
	}
	return got, nil
}

// countLines counts the newlines of b.
func countLines(b []byte) int64 {
	var n int64
	for _, c := range b {
		if c == '\n' {
			n++
		}
	}
	return n
}
