package helm_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// verifiedCLIs are the CLI builds the README's "Supported CLIs" table says
// were verified, by command, and whether they emit the workflow events.
var verifiedCLIs = map[string]map[string]bool{
	"claude": {"2.1.328": true, "2.1.334": true, "2.1.335": true},
	"cbc":    {"2.117.0": false}, // prints no task_* event at all
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
