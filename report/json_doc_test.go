package report

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestJSONDocKeys keeps the `replay --json` contract of docs/json.md complete:
// every key the contract types can write (Workflow, Task, Phase, Agent,
// LaunchedBy, Cost, ModelCost, TokensByType, Session, StatsLine) is named
// in that section, so a key added to the code and not documented fails.
func TestJSONDocKeys(t *testing.T) {
	b, err := os.ReadFile("../docs/json.md")
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	start := strings.Index(md, "\n## `replay --json`: a contract for scripts\n")
	if start < 0 {
		t.Fatal("docs/json.md has no `replay --json` contract section")
	}
	sec := md[start+1:]
	if end := strings.Index(sec, "\n## "); end >= 0 {
		sec = sec[:end]
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
				t.Errorf("%s.%s: key %q is not in docs/json.md's replay --json contract", typ.Name(), f.Name, name)
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
