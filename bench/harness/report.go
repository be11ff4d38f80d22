package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"
)

// row is one line of the figure table.
type row struct {
	section, name, value, target, verdict string
}

// report collects the figures of every section.
type report struct {
	machine []string
	rows    []row
	notes   []string
	elapsed time.Duration
}

func (r *report) add(section, name, value string) {
	r.rows = append(r.rows, row{section: section, name: name, value: value})
}

// addTarget adds a row compared with a target; ok says whether it is met.
func (r *report) addTarget(section, name, value, target string, ok bool) {
	v := "meets"
	if !ok {
		v = "**misses**"
	}
	r.rows = append(r.rows, row{section: section, name: name, value: value, target: target, verdict: v})
}

func (r *report) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

func (r *report) markdown(c *config) string {
	var b strings.Builder
	mode := "full"
	if c.quick {
		mode = "quick (smoke check: tiny sizes, figures meaningless)"
	}
	fmt.Fprintf(&b, "## cbc-otel benchmark: %s; medians of %d runs (replay, scaling, memory, cpu serve of many files: %d)\n\n", mode, c.runs, min(c.runs, 3))
	for _, m := range r.machine {
		fmt.Fprintf(&b, "- %s\n", m)
	}
	fmt.Fprintf(&b, "- binary: `%s`\n- harness wall time: %s\n\n", c.bin, r.elapsed.Round(time.Second))
	b.WriteString("| section | case | median (spread) | target | |\n|---|---|---|---|---|\n")
	for _, x := range r.rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", x.section, x.name, x.value, x.target, x.verdict)
	}
	if len(r.notes) > 0 {
		b.WriteString("\nNotes:\n\n")
		for _, n := range r.notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

// describeMachine returns CPU model, cores, kernel, Go version and load.
func describeMachine(ctx context.Context, c *config) []string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	kernel := "unknown kernel"
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = "Linux " + strings.TrimSpace(string(b))
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		mem = strings.Fields(strings.SplitN(string(b), "\n", 2)[0] + " x x")[1]
	}
	load := ""
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	goVer := runtime.Version() + " (harness)"
	if out, err := exec.CommandContext(ctx, "go", "version", c.bin).Output(); err == nil {
		goVer = strings.TrimSpace(string(out))
	}
	nodeVer := "node: not run"
	if c.node != "" {
		if out, err := exec.CommandContext(ctx, c.node, "--version").Output(); err == nil {
			nodeVer = "node " + strings.TrimSpace(string(out))
		}
	}
	return []string{
		fmt.Sprintf("CPU: %s, %d logical cores; RAM %s kB", cpu, runtime.NumCPU(), mem),
		kernel,
		goVer,
		nodeVer,
		"load average at start: " + load,
	}
}

// median of xs (xs is not modified); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// spread formats the min–max range of xs for the table.
func spread(xs []float64, format string) string {
	if len(xs) < 2 {
		return ""
	}
	return fmt.Sprintf(" ("+format+"–"+format+")", slices.Min(xs), slices.Max(xs))
}

// percentile returns the p-th percentile (0–100) of sorted, nearest rank.
func percentile(sorted []int64, p float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p/100*float64(len(sorted))+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func mib(bytes int64) float64 { return float64(bytes) / (1 << 20) }
