package helm_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/cbc-otel/cbc-otel/internal/mdtable"
)

// verifiedCLIs are the CLI builds the README's "Supported CLIs" table says
// were verified, by command, and whether they emit the workflow events.
var verifiedCLIs = map[string]map[string]bool{
	"claude": {"2.1.328": true, "2.1.334": true, "2.1.335": true},
	"cbc":    {"2.117.0": false}, // prints no task_* event at all
}

// TestVerifiedCLIsAreTheReadmes: verifiedCLIs is the README's "Supported
// CLIs" table, build for build: each Claude Code and CodeBuddy CLI row's
// version, and whether its "workflow runs, agents, metrics, spans" cell
// says yes. A build added to or dropped from the table fails until the
// examples' check knows it.
func TestVerifiedCLIsAreTheReadmes(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	command := map[string]string{"Claude Code": "claude", "CodeBuddy CLI": "cbc"}
	const events = "workflow runs, agents, metrics, spans"
	readme := map[string]map[string]bool{}
	for _, tb := range mdtable.Tables(string(b)) {
		if tb.Column("CLI") != 0 || tb.Column("version") < 0 || tb.Column(events) < 0 {
			continue
		}
		for _, row := range tb.Rows {
			cmd, ok := command[row[0]]
			if !ok {
				continue
			}
			version, _, _ := strings.Cut(tb.Cell(row, "version"), " ")
			if readme[cmd] == nil {
				readme[cmd] = map[string]bool{}
			}
			readme[cmd][version] = strings.HasPrefix(tb.Cell(row, events), "yes")
		}
	}
	if len(readme) == 0 {
		t.Fatalf("README.md has no Supported CLIs table (| CLI | version | ... | %s | ...)", events)
	}
	for cmd, builds := range readme {
		for v, ev := range builds {
			if got, ok := verifiedCLIs[cmd][v]; !ok || got != ev {
				t.Errorf("README.md lists %s %s (workflow events: %v); verifiedCLIs has %v, %v", cmd, v, ev, got, ok)
			}
		}
	}
	for cmd, builds := range verifiedCLIs {
		for v := range builds {
			if _, ok := readme[cmd][v]; !ok {
				t.Errorf("verifiedCLIs has %s %s, which README.md's Supported CLIs do not list", cmd, v)
			}
		}
	}
}

// noWorkflowNote is what an example running a CLI without workflow events
// must say.
const noWorkflowNote = "no task_* event"

// TestExamplesPinVerifiedCLIs: an example that runs a CLI directly pins a
// build of the README's table; one whose build emits no workflow events
// (CodeBuddy 2.117.0, also inside the CodeBuddy agent SDK 0.3.201) says so
// in the file. Most examples are for workflow observability: at most one
// may run such a build.
func TestExamplesPinVerifiedCLIs(t *testing.T) {
	blind, pinned := 0, 0
	for _, f := range examples(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			Workload struct {
				Image struct {
					Tag string `json:"tag"`
				} `json:"image"`
				Command []string `json:"command"`
				SDK     struct {
					RealCLI []string `json:"realCLI"`
				} `json:"sdk"`
			} `json:"workload"`
		}
		if err := yaml.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		name := filepath.Base(f)
		w := v.Workload
		events := true
		switch {
		case len(w.Command) > 0 && verifiedCLIs[w.Command[0]] != nil:
			pinned++
			ok, known := verifiedCLIs[w.Command[0]][w.Image.Tag]
			if !known {
				t.Errorf("%s runs %s %q, a build the README's Supported CLIs do not list", name, w.Command[0], w.Image.Tag)
			}
			events = ok
		case slices.ContainsFunc(w.SDK.RealCLI, func(s string) bool { return strings.Contains(s, "codebuddy-headless") }):
			events = false // @tencent-ai/agent-sdk 0.3.201 bundles CodeBuddy 2.117.0
		}
		if !events {
			blind++
			if !strings.Contains(string(b), noWorkflowNote) {
				t.Errorf("%s runs a CLI that emits no workflow events and does not say so (%q)", name, noWorkflowNote)
			}
		}
	}
	if pinned < 4 || blind > 1 {
		t.Errorf("%d examples pin a CLI build, %d of them without workflow events; want most pinned, at most one blind", pinned, blind)
	}
}
