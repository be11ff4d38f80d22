package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDemoJoinedSeriesSayDemo: under demo --cli-telemetry.join every series
// says demo="true", the join's cbc_otel_cli_* too (they once came without
// it: the shipped alert rules, which leave demo="true" out, would page on a
// demo's).
func TestDemoJoinedSeriesSayDemo(t *testing.T) {
	file := filepath.Join(t.TempDir(), "demo.prom")
	out, err := exec.Command(wrapperBin, "demo", "--simulate.speed", "0", "--simulate.scenarios", "completed", "--cli-telemetry.join",
		"--web.listen-address=", "--metrics.file", file).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cli := 0
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "cbc_otel_cli_") {
			cli++
		}
		if !strings.Contains(line, `demo="true"`) {
			t.Errorf("a series of the demo without demo=\"true\": %s", line)
		}
	}
	if cli == 0 {
		t.Errorf("no cbc_otel_cli_* series in the demo's metrics file:\n%s", b)
	}
}
