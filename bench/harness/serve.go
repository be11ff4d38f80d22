package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/cbc-otel/cbc-otel/bench/internal/procstat"
	"github.com/cbc-otel/cbc-otel/bench/internal/streamgen"
)

// Targets of the serve section (issue #33): serve as deployed, with a
// checkpoint, following many files.
const (
	serveTargetUS        = 10.0     // CPU per event, 256 files × 50 events/s
	serveTargetKB        = 48 << 10 // its peak RSS
	serveIdleTargetShare = 2.0      // % of one core, 1,024 idle files
	serveIdleTargetKB    = 64 << 10 // their peak RSS
)

// serveSection measures serve as deployed (--state-dir): following
// c.cpuFiles files growing at c.cpuFileRate lines/s each (CPU per event,
// peak RSS), and following 4×c.cpuFiles files that do not grow (CPU share
// of one core, peak RSS). Every case alternates with the baseline binary,
// as in the cpu section.
func serveSection(ctx context.Context, c *config, rep *report) error {
	start := time.Now()
	bins, err := measuredBins(ctx, c, rep, "serve")
	if err != nil {
		return err
	}
	dir := filepath.Join(c.work, "serve")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("serve dir: %w", err)
	}
	defer os.RemoveAll(dir)
	idleFiles := 4 * c.cpuFiles
	withState := func(tag string) ([]string, error) {
		sd := filepath.Join(dir, tag+"-state")
		if err := os.MkdirAll(sd, 0o755); err != nil {
			return nil, fmt.Errorf("state dir: %w", err)
		}
		return []string{"--state-dir", sd}, nil
	}
	cases := []cpuCase{
		{"grow", 3, func(b cpuBin, i int) (cpuResult, error) {
			tag := fmt.Sprintf("grow-%d-%s", i, b.tag())
			extra, err := withState(tag)
			if err != nil {
				return cpuResult{}, err
			}
			return cpuFollow(ctx, c, b, dir, tag, extra)
		}},
		{"idle", 3, func(b cpuBin, i int) (cpuResult, error) {
			tag := fmt.Sprintf("idle-%d-%s", i, b.tag())
			extra, err := withState(tag)
			if err != nil {
				return cpuResult{}, err
			}
			return serveIdle(ctx, b, dir, tag, idleFiles, c.cpuFollowDur, extra)
		}},
	}
	results := map[string][][]cpuResult{}
	for i := range min(c.runs, 3) {
		for _, cs := range cases {
			if results[cs.name] == nil {
				results[cs.name] = make([][]cpuResult, len(bins))
			}
			for bi, b := range bins {
				if err := ctx.Err(); err != nil {
					return fmt.Errorf("interrupted: %w", err)
				}
				r, err := cs.run(b, i)
				if err != nil {
					return fmt.Errorf("%s, %s: %w", cs.name, b.name, err)
				}
				if r.invalid != "" {
					rep.note("serve %s, %s, run %d: NOT counted: %s", cs.name, b.name, i+1, r.invalid)
				}
				results[cs.name][bi] = append(results[cs.name][bi], r)
			}
		}
	}
	share := func(rs []cpuResult) []float64 {
		return validValues(rs, func(r cpuResult) float64 { return 100 * r.cpu.Seconds() / r.wall.Seconds() })
	}
	peak := func(rs []cpuResult) []float64 {
		return validValues(rs, func(r cpuResult) float64 { return float64(r.peakKB) / 1024 })
	}
	gsec := fmt.Sprintf("serve --state-dir, %d files × %d events/s", c.cpuFiles, c.cpuFileRate)
	grow := results["grow"]
	addCompared(rep, bins, gsec, fmt.Sprintf("CPU share of one core over %s", c.cpuFollowDur), "%", "%.1f", mapBins(grow, share), "", nil)
	addCompared(rep, bins, gsec, "CPU per event", "µs", "%.2f", mapBins(grow, func(rs []cpuResult) []float64 { return validValues(rs, cpuResult.usPerEvent) }),
		fmt.Sprintf("≤ %g µs", serveTargetUS), func(v float64) bool { return v <= serveTargetUS })
	addCompared(rep, bins, gsec, "serve peak RSS (VmHWM)", "MiB", "%.1f", mapBins(grow, peak),
		fmt.Sprintf("≤ %d MiB", serveTargetKB>>10), func(v float64) bool { return v*1024 <= serveTargetKB })
	isec := fmt.Sprintf("serve --state-dir, %d idle files", idleFiles)
	idle := results["idle"]
	addCompared(rep, bins, isec, fmt.Sprintf("CPU share of one core over %s", c.cpuFollowDur), "%", "%.2f", mapBins(idle, share),
		fmt.Sprintf("≤ %g %%", serveIdleTargetShare), func(v float64) bool { return v <= serveIdleTargetShare })
	addCompared(rep, bins, isec, "serve peak RSS (VmHWM)", "MiB", "%.1f", mapBins(idle, peak),
		fmt.Sprintf("≤ %d MiB", serveIdleTargetKB>>10), func(v float64) bool { return v*1024 <= serveIdleTargetKB })
	rep.note("serve: as deployed, with --state-dir (checkpoints on) and --traces-file; the growing case is the cpu section's follow case (%d files, %d lines/s each, for %s) with a state directory", c.cpuFiles, c.cpuFileRate, c.cpuFollowDur)
	rep.note("serve idle: %d plain files, each holding the first line of a run (an open run per stream), followed with --follow.max-files %d; once every line is counted, serve's CPU (/proc/PID/stat) over %s in which nothing is written; peak RSS is VmHWM over serve's whole life", idleFiles, idleFiles, c.cpuFollowDur)
	rep.note("serve: the section took %s (%d runs of every case × %d binaries, interleaved)", time.Since(start).Round(time.Second), min(c.runs, 3), len(bins))
	return nil
}

// serveIdle has serve follow n files that hold one line each and do not
// grow, and measures serve's CPU over dur of that and its peak RSS.
func serveIdle(ctx context.Context, b cpuBin, dir, tag string, n int, dur time.Duration, extra []string) (cpuResult, error) {
	fdir := filepath.Join(dir, tag)
	if err := os.MkdirAll(fdir, 0o755); err != nil {
		return cpuResult{}, fmt.Errorf("idle dir: %w", err)
	}
	defer os.RemoveAll(fdir)
	for i := range n {
		line := streamgen.FollowLine(nil, simEpoch, i, 0)
		if err := os.WriteFile(filepath.Join(fdir, fmt.Sprintf("stream-%04d.ndjson", i)), line, 0o644); err != nil {
			return cpuResult{}, fmt.Errorf("idle file: %w", err)
		}
	}
	args := append([]string{"--follow", filepath.Join(fdir, "*.ndjson"), "--follow.max-files", strconv.Itoa(n),
		"--traces-file", filepath.Join(dir, tag+"-traces.jsonl")}, extra...)
	s, err := startServe(ctx, b.path, args, dir, tag)
	if err != nil {
		return cpuResult{}, err
	}
	defer s.Stop()
	if _, err := s.WaitLines(ctx, int64(n), time.Minute); err != nil {
		return cpuResult{}, fmt.Errorf("serve did not follow every file: %w", err)
	}
	cpu0, err := procstat.CPU(s.Pid())
	if err != nil {
		return cpuResult{}, err
	}
	t0 := time.Now()
	select {
	case <-time.After(dur):
	case <-ctx.Done():
		return cpuResult{}, ctx.Err()
	}
	cpu1, err := procstat.CPU(s.Pid())
	if err != nil {
		return cpuResult{}, err
	}
	r := cpuResult{cpu: cpu1 - cpu0, wall: time.Since(t0)}
	if r.peakKB, err = s.Stop(); err != nil {
		return cpuResult{}, err
	}
	return r, nil
}
