package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
)

// scaling replays one workflow with N agents for growing N. Every change
// re-sends the whole snapshot, so the bytes grow with N²; linear processing
// means MiB/s stays about constant across N.
func scaling(ctx context.Context, c *config, rep *report) error {
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", os.DevNull, err)
	}
	defer devnull.Close()
	rates := map[int]float64{}
	for _, n := range c.agents {
		path, err := agentsFile(ctx, c, n)
		if err != nil {
			return err
		}
		size, err := fileSize(path)
		if err != nil {
			return err
		}
		if err := warm(path); err != nil {
			return err
		}
		var wall []float64
		for range min(c.runs, 3) {
			cmd := exec.CommandContext(ctx, c.bin, "replay", c.names.of("summary.json", "json"), path)
			cmd.Stdout, cmd.Stderr = devnull, os.Stderr
			m, err := timed(cmd)
			if err != nil {
				return err
			}
			wall = append(wall, m.wall.Seconds())
		}
		w := median(wall)
		rates[n] = mib(size) / w
		rep.add("scaling", fmt.Sprintf("1 workflow, %d agents: %.1f MiB", n, mib(size)),
			fmt.Sprintf("%.3f s = %.1f MiB/s%s", w, rates[n], spread(wall, "%.3f")))
		if c.quick {
			os.Remove(path)
		}
	}
	first, last := c.agents[0], c.agents[len(c.agents)-1]
	x := rates[last] / rates[first]
	rep.addTarget("scaling", fmt.Sprintf("MiB/s at %d / at %d agents", last, first), fmt.Sprintf("%.2f", x), "≈ 1 (linear; ≥ 0.7)", x >= 0.7)
	return nil
}
