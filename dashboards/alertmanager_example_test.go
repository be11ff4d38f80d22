package dashboards

import (
	"os"
	"reflect"
	"regexp"
	"testing"

	"sigs.k8s.io/yaml"
)

// amRoute is the part of an Alertmanager route the example's checks read.
type amRoute struct {
	Receiver string    `json:"receiver"`
	GroupBy  []string  `json:"group_by,omitempty"`
	Matchers []string  `json:"matchers,omitempty"`
	Routes   []amRoute `json:"routes,omitempty"`
}

// TestAlertmanagerExample: alertmanager.example.yml sends every alert the
// rules can raise to the receiver of its severity (critical → pager,
// warning → tickets, info → blackhole) by one matcher of exactly that
// severity, and the routing quoted in README.md is the file's. (The e2e
// test TestAlertsReachTheirReceivers runs the file in a real
// Alertmanager.)
func TestAlertmanagerExample(t *testing.T) {
	raw, err := os.ReadFile("alertmanager.example.yml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Route     amRoute `json:"route"`
		Receivers []struct {
			Name string `json:"name"`
		} `json:"receivers"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	receivers := map[string]bool{}
	for _, r := range file.Receivers {
		receivers[r.Name] = true
	}
	want := map[string]string{SeverityCritical: "pager", SeverityWarning: "tickets", SeverityInfo: "blackhole"}
	rf, err := Rules(RuleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			sev := r.Labels["severity"]
			seen[sev] = true
			got := file.Route.Receiver
			for _, sub := range file.Route.Routes {
				if reflect.DeepEqual(sub.Matchers, []string{`severity="` + sev + `"`}) {
					got = sub.Receiver
					break
				}
			}
			if got != want[sev] || !receivers[got] {
				t.Errorf("%s (severity %q) goes to %q, want %q (a declared receiver)", r.Alert, sev, got, want[sev])
			}
		}
	}
	if len(seen) != len(want) {
		t.Errorf("the rules use severities %v; the example routes %v", seen, want)
	}

	// README.md quotes the routing tree, the timings left out.
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)alertmanager\\.example\\.yml.*?```yaml\n(.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md quotes no routing after naming alertmanager.example.yml")
	}
	var quoted struct {
		Route amRoute `json:"route"`
	}
	if err := yaml.UnmarshalStrict(m[1], &quoted); err != nil {
		t.Fatalf("README.md's routing: %v", err)
	}
	if !reflect.DeepEqual(quoted.Route, file.Route) {
		t.Errorf("README.md's routing %+v differs from alertmanager.example.yml's %+v", quoted.Route, file.Route)
	}
}
