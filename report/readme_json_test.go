package report

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestReadmeJSONKeys keeps the README's `replay --summary.json` contract complete:
// every key the contract types can write (Workflow, Task, Phase, Agent,
// LaunchedBy, Cost, ModelCost, TokensByType, Session, StatsLine) is named
// in that section, so a key added to the code and not documented fails.
func TestReadmeJSONKeys(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "### `replay --summary.json`: a contract for scripts")
	if start < 0 {
		t.Fatal("README has no `replay --summary.json` contract section")
	}
	sec := readme[start:]
	if end := strings.Index(sec[4:], "\n### "); end >= 0 {
		sec = sec[:end+4]
	}
	var keys func(reflect.Type)
	seen := map[string]bool{}
	keys = func(typ reflect.Type) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			if f.Anonymous {
				keys(f.Type)
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" || seen[name] {
				continue
			}
			seen[name] = true
			if !strings.Contains(sec, `"`+name+`"`) && !strings.Contains(sec, "`"+name+"`") {
				t.Errorf("%s.%s: key %q is not in the README's replay --summary.json contract", typ.Name(), f.Name, name)
			}
		}
	}
	for _, v := range []any{Workflow{}, Task{}, Phase{}, Agent{}, LaunchedBy{}, Cost{}, ModelCost{}, TokensByType{}, Session{}, StatsLine{}} {
		keys(reflect.TypeOf(v))
	}
	if len(seen) < 30 {
		t.Fatalf("found %d keys; did the contract types change shape?", len(seen))
	}
}
