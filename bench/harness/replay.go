package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// counts maps a terminal status (completed, failed, stopped) to a number of
// workflow tasks.
type counts map[string]int64

func (c counts) String() string {
	keys := slices.Sorted(maps.Keys(c))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, c[k])
	}
	return strings.Join(parts, " ")
}

// replayPeers times `cbc-otel replay --summary.json` against two peers doing the
// comparable job (terminal status counts of the workflow tasks): the spec's
// reference consumer in Node, and an OpenTelemetry Collector (filelog →
// transform parsing each line's JSON → count by status → prometheus), timed
// until its counts reach the totals. It does so on the task-heavy stream,
// then on a mixed one: the same task events interleaved with large
// conversation lines, about half of its bytes, which every consumer must
// read past (the Collector is left out there: see the note). Every
// consumer must agree on the counts, and the mixed stream must give the
// task-heavy stream's.
func replayPeers(ctx context.Context, c *config, rep *report) error {
	tasks, err := taskFile(ctx, c, c.taskMB)
	if err != nil {
		return err
	}
	mixed, err := interleavedFile(c, tasks)
	if err != nil {
		return err
	}
	if c.node == "" {
		rep.note("replay: the Node peer was NOT run (no node executable)")
	}
	if c.otelcol == "" {
		rep.note("replay: the OpenTelemetry Collector peer was NOT run (set CBC_OTELCOL_BIN or -otelcol; build it with tools/otelcol/build.sh DIR)")
	}
	want, err := replayStream(ctx, c, rep, tasks, "task-heavy", "", nil, true)
	if err != nil {
		return err
	}
	ts, err := fileSize(tasks)
	if err != nil {
		return err
	}
	ms, err := fileSize(mixed)
	if err != nil {
		return err
	}
	detail := fmt.Sprintf(", %.0f %% of the bytes in conversation lines", 100*float64(ms-ts)/float64(ms))
	if _, err := replayStream(ctx, c, rep, mixed, "mixed", detail, want, false); err != nil {
		return fmt.Errorf("mixed stream: %w", err)
	}
	if c.otelcol != "" {
		rep.note("replay mixed: the Collector peer is not run on the mixed stream: the task-heavy stream already compares it, and on this one it would only parse more large lines (minutes of the full run)")
	}
	rep.note("replay: `replay --summary.json FILE` (no exporters) vs `node bench/peers/consumer.mjs FILE` vs the ocb Collector; every wall time includes process start-up (the collector's: until its counts reached the totals); the mixed stream is the task-heavy one with assistant text and user tool-result lines of 4–64 KiB between its lines (streamgen.Interleave, seed %d)", mixedSeed)
	return nil
}

// replayStream times replay and the peers on the stream at path, name
// being how the table calls it (detail is added to its section). want is the counts the stream must give
// (nil: whatever replay counts, returned); withCollector runs the
// Collector peer too, when there is one.
func replayStream(ctx context.Context, c *config, rep *report, path, name, detail string, want counts, withCollector bool) (counts, error) {
	size, err := fileSize(path)
	if err != nil {
		return nil, err
	}
	if err := warm(path); err != nil {
		return nil, err
	}
	type peer struct {
		name string
		run  func() (counts, int64, measured, error)
	}
	peers := []peer{{"replay", func() (counts, int64, measured, error) { return replayOnce(ctx, c, path) }}}
	if c.node != "" {
		peers = append(peers, peer{"node", func() (counts, int64, measured, error) { return nodeOnce(ctx, c, path) }})
	}
	if c.otelcol != "" && withCollector {
		peers = append(peers, peer{"otelcol", func() (counts, int64, measured, error) { return otelcolOnce(ctx, c, path, want) }})
	}
	expected := want
	wall := map[string][]float64{}
	var lines int64
	for i := range min(c.runs, 3) {
		for _, p := range peers {
			got, n, m, err := p.run()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p.name, err)
			}
			if p.name == "replay" {
				lines = n
				if want == nil {
					// The replay's counts, which the peers (the
					// collector: its wait) must reach.
					want = got
				}
				if i == 0 {
					v := got.String()
					if expected != nil && maps.Equal(got, expected) {
						v += " (= task-heavy)"
					}
					rep.add("replay", "terminal status counts, "+name+" (replay)", v)
				}
			}
			if !maps.Equal(got, want) {
				if p.name == "replay" {
					return nil, fmt.Errorf("replay counted %v, the task-heavy stream %v", got, want)
				}
				return nil, fmt.Errorf("%s counted %v, replay %v", p.name, got, want)
			}
			if i == 0 && p.name != "replay" {
				rep.add("replay", "terminal status counts, "+name+" ("+p.name+")", got.String()+" (agree)")
			}
			wall[p.name] = append(wall[p.name], m.wall.Seconds())
		}
	}
	if len(want) == 0 {
		return nil, fmt.Errorf("the %s stream has no terminal workflow task", name)
	}
	sec := fmt.Sprintf("replay %.0f MiB %s%s", mib(size), name, detail)
	for _, p := range peers {
		w := median(wall[p.name])
		rep.add(sec, p.name+": wall", fmt.Sprintf("%.3f s = %.1f MiB/s, %.0f events/s%s", w, mib(size)/w, float64(lines)/w, spread(wall[p.name], "%.3f")))
	}
	r := median(wall["replay"])
	if len(wall["node"]) > 0 {
		x := median(wall["node"]) / r
		rep.addTarget(sec, "replay speed / Node", fmt.Sprintf("%.2f×", x), "≥ 10×", x >= 10)
	}
	if len(wall["otelcol"]) > 0 {
		x := median(wall["otelcol"]) / r
		rep.addTarget(sec, "replay speed / Collector", fmt.Sprintf("%.2f×", x), "≥ 5×", x >= 5)
	}
	return want, nil
}

// replayLine is the part of a `replay --summary.json` line the benchmark reads.
type replayLine struct {
	Kind   string `json:"kind"`
	Status string `json:"status"`
	Lines  int64  `json:"lines"`
}

func replayOnce(ctx context.Context, c *config, path string) (counts, int64, measured, error) {
	outPath := filepath.Join(c.work, "replay-out.jsonl")
	out, err := os.Create(outPath)
	if err != nil {
		return nil, 0, measured{}, fmt.Errorf("replay output: %w", err)
	}
	defer os.Remove(outPath)
	cmd := exec.CommandContext(ctx, c.bin, "replay", c.names.of("summary.json", "json"), path)
	cmd.Stdout, cmd.Stderr = out, os.Stderr
	m, err := timed(cmd)
	if cerr := out.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("replay output: %w", cerr)
	}
	if err != nil {
		return nil, 0, m, err
	}
	f, err := os.Open(outPath)
	if err != nil {
		return nil, 0, m, fmt.Errorf("replay output: %w", err)
	}
	defer f.Close()
	got := counts{}
	var lines int64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var l replayLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, 0, m, fmt.Errorf("replay output: %w", err)
		}
		switch l.Kind {
		case "workflow":
			got[l.Status]++
		case "stats":
			lines = l.Lines
		}
	}
	if err := sc.Err(); err != nil {
		return nil, 0, m, fmt.Errorf("replay output: %w", err)
	}
	return got, lines, m, nil
}

func nodeOnce(ctx context.Context, c *config, path string) (counts, int64, measured, error) {
	var out strings.Builder
	cmd := exec.CommandContext(ctx, c.node, filepath.Join(c.root, "bench", "peers", "consumer.mjs"), path)
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	m, err := timed(cmd)
	if err != nil {
		return nil, 0, m, err
	}
	var res struct {
		Counts    counts `json:"counts"`
		Lines     int64  `json:"lines"`
		Malformed int64  `json:"malformed"`
	}
	if err := json.Unmarshal([]byte(out.String()), &res); err != nil {
		return nil, 0, m, fmt.Errorf("node output %q: %w", out.String(), err)
	}
	return res.Counts, res.Lines, m, nil
}

// otelcolConfig reads one file from the beginning, parses each line's JSON in
// the transform processor, counts task_notification events by status with
// the count connector, adds the count's per-batch deltas up (the prometheus
// exporter alone would show only the last batch's delta: the connector's
// deltas are not contiguous in time) and exposes the totals on a loopback
// Prometheus endpoint.
// Its own telemetry is off (no :8888 listener).
const otelcolConfig = `receivers:
  file_log:
    include: [%q]
    start_at: beginning
    max_log_size: 64MiB
processors:
  delta_to_cumulative: {}
  transform:
    error_mode: ignore
    log_statements:
      - context: log
        statements:
          - set(cache["j"], ParseJSON(body))
          - set(attributes["type"], cache["j"]["type"])
          - set(attributes["subtype"], cache["j"]["subtype"])
          - set(attributes["status"], cache["j"]["status"])
connectors:
  count:
    logs:
      cbc.task.notifications:
        description: terminal task notifications by status
        conditions:
          - attributes["type"] == "system" and attributes["subtype"] == "task_notification"
        attributes:
          - key: status
exporters:
  prometheus:
    endpoint: 127.0.0.1:%d
service:
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
  pipelines:
    logs:
      receivers: [file_log]
      processors: [transform]
      exporters: [count]
    metrics:
      receivers: [count]
      processors: [delta_to_cumulative]
      exporters: [prometheus]
`

// otelcolOnce starts the collector on path and polls its /metrics until the
// counts equal want (or exceed them: an error), then stops it. The wall time
// is from start to the first poll that showed the totals.
func otelcolOnce(ctx context.Context, c *config, path string, want counts) (counts, int64, measured, error) {
	port, err := freePort()
	if err != nil {
		return nil, 0, measured{}, err
	}
	cfg := filepath.Join(c.work, "otelcol.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, otelcolConfig, path, port), 0o644); err != nil {
		return nil, 0, measured{}, fmt.Errorf("collector config: %w", err)
	}
	logPath := filepath.Join(c.work, "otelcol.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, 0, measured{}, fmt.Errorf("collector log: %w", err)
	}
	defer logf.Close()
	cmd := exec.CommandContext(ctx, c.otelcol, "--config", cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, 0, measured{}, fmt.Errorf("start collector: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}
	defer stop()

	client := &http.Client{Timeout: 2 * time.Second}
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	deadline := time.Now().Add(c.peerWait)
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	var got counts
	for {
		select {
		case <-poll.C:
		case err := <-exited:
			stopped = true
			return nil, 0, measured{}, fmt.Errorf("collector exited (%v) before counting; see %s", err, logPath)
		case <-ctx.Done():
			return nil, 0, measured{}, ctx.Err()
		}
		if time.Now().After(deadline) {
			return nil, 0, measured{}, fmt.Errorf("collector counts %v did not reach %v within %s", got, want, c.peerWait)
		}
		got, err = scrapeCounts(client, url)
		if err != nil {
			continue // not listening yet
		}
		if maps.Equal(got, want) {
			break
		}
		for k, v := range got {
			if v > want[k] {
				return got, 0, measured{}, fmt.Errorf("collector counted %v, more than replay's %v", got, want)
			}
		}
	}
	m := measured{wall: time.Since(start)}
	stop()
	m.cpu = measuredOf(cmd, m.wall).cpu
	return got, 0, m, nil
}

// scrapeCounts reads the cbc_task_notifications series of a Prometheus text
// exposition, by status label.
func scrapeCounts(client *http.Client, url string) (counts, error) {
	resp, err := client.Get(url)
	if err != nil {
		return nil, fmt.Errorf("scrape: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape: %s", resp.Status)
	}
	got := counts{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "cbc_task_notifications") {
			continue
		}
		_, rest, ok := strings.Cut(line, `status="`)
		if !ok {
			continue
		}
		status, rest, _ := strings.Cut(rest, `"`)
		fields := strings.Fields(rest[strings.LastIndex(rest, "}")+1:])
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("scrape: %q: %w", line, err)
		}
		got[status] += int64(v)
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("scrape: %w", err)
	}
	return got, nil
}
