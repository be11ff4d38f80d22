package dashboards

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

// strictErr normalizes UnmarshalJSONStrict's result: on success it returns
// a typed-nil cog.BuildErrors, which is a non-nil error interface.
func strictErr(err error) error {
	var be cog.BuildErrors
	if errors.As(err, &be) && len(be) == 0 {
		return nil
	}
	return err
}

// TestDashboardsRoundTripStrictly proves each committed dashboard decodes
// strictly into the SDK's types (no unknown field, no wrong type, nothing
// required missing), re-encodes to the same JSON, and that every panel has
// a datasource and a unit, every target the Prometheus datasource
// variable, the template variables are there, and duration panels carry
// exemplars with a trace link.
func TestDashboardsRoundTripStrictly(t *testing.T) {
	plugins.RegisterDefaultPlugins()
	for _, c := range []struct {
		file string
		vars []string
	}{
		{OverviewFile, []string{"datasource", "tracing", "job", "namespace", "pod", "workflow"}},
		{HealthFile, []string{"datasource", "tracing", "job", "namespace", "pod"}},
	} {
		t.Run(c.file, func(t *testing.T) {
			raw, err := os.ReadFile(c.file)
			if err != nil {
				t.Fatal(err)
			}
			d, err := strictDashboard(raw)
			if err != nil {
				t.Fatalf("strict decode: %v", err)
			}
			back, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			var a, b any
			if err := json.Unmarshal(raw, &a); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(back, &b); err != nil {
				t.Fatal(err)
			}
			if diffs := jsonDiff("", a, b, nil); len(diffs) > 0 {
				t.Errorf("JSON does not round-trip through dashboard.Dashboard:\n%s", strings.Join(diffs, "\n"))
			}
			if d.SchemaVersion < 39 { // Grafana 11.0 writes 39
				t.Errorf("schemaVersion %d, want a Grafana 11/12 one", d.SchemaVersion)
			}
			if d.Uid == nil || d.Title == nil {
				t.Errorf("uid or title missing")
			}
			have := map[string]bool{}
			for _, v := range d.Templating.List {
				have[v.Name] = true
			}
			for _, v := range c.vars {
				if !have[v] {
					t.Errorf("template variable %q missing", v)
				}
			}

			// Panels, checked on the generic JSON so nothing the SDK
			// types hide escapes the check.
			var generic struct {
				Panels []map[string]any `json:"panels"`
			}
			if err := json.Unmarshal(raw, &generic); err != nil {
				t.Fatal(err)
			}
			ids := map[float64]bool{}
			n := 0
			for _, p := range generic.Panels {
				title, _ := p["title"].(string)
				if id, _ := p["id"].(float64); ids[id] {
					t.Errorf("%q: duplicate panel id %v", title, id)
				} else {
					ids[id] = true
				}
				if p["type"] == "row" {
					continue
				}
				n++
				ds, _ := p["datasource"].(map[string]any)
				if ds["uid"] != "${datasource}" || ds["type"] != "prometheus" {
					t.Errorf("%q: datasource %v, want the ${datasource} variable", title, p["datasource"])
				}
				fc, _ := p["fieldConfig"].(map[string]any)
				defs, _ := fc["defaults"].(map[string]any)
				if u, _ := defs["unit"].(string); u == "" {
					t.Errorf("%q: no unit", title)
				}
				targets, _ := p["targets"].([]any)
				if len(targets) == 0 {
					t.Errorf("%q: no targets", title)
				}
				exemplar := false
				for _, tg := range targets {
					tm := tg.(map[string]any)
					tds, _ := tm["datasource"].(map[string]any)
					if tds["uid"] != "${datasource}" {
						t.Errorf("%q: target datasource %v", title, tm["datasource"])
					}
					if e, _ := tm["expr"].(string); e == "" {
						t.Errorf("%q: target without expr", title)
					}
					if tm["exemplar"] == true {
						exemplar = true
					}
				}
				if lt := strings.ToLower(title); strings.Contains(lt, "duration") || strings.Contains(lt, "cost per run") {
					links, _ := defs["links"].([]any)
					link := ""
					if len(links) > 0 {
						link, _ = links[0].(map[string]any)["url"].(string)
					}
					if !exemplar || !strings.Contains(link, "trace_id") || !strings.Contains(link, "tracing") {
						t.Errorf("%q: duration or cost-per-run panel without exemplars and a trace link (exemplar %v, link %q)", title, exemplar, link)
					}
				}
			}
			if n < 8 {
				t.Errorf("%d panels, want more", n)
			}
		})
	}
}

// strictDashboard decodes raw strictly. The SDK (v0.0.22) returns a
// typed-nil cog.BuildErrors on success everywhere, and its own generated
// code trips over that in three places: PanelOrRowPanel drops every panel,
// Panel drops its options (StrictOptionsUnmarshaler) and its targets
// (StrictDataqueryUnmarshaler), all silently. So this decodes the same
// pieces again with the same strict decoders, normalizing their errors,
// and reports any real error.
type strictUnmarshaler interface{ UnmarshalJSONStrict([]byte) error }

//lint:ignore SA1019 the classic model on purpose (doc.go)
func strictDashboard(raw []byte) (d dashboard.Dashboard, err error) {
	if err := strictErr(d.UnmarshalJSONStrict(raw)); err != nil {
		return d, err
	}
	var generic struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(raw, &generic); err != nil {
		return d, err
	}
	d.Panels = nil
	for i, rp := range generic.Panels {
		var parts struct {
			Type    string            `json:"type"`
			Options json.RawMessage   `json:"options"`
			Targets []json.RawMessage `json:"targets"`
		}
		if err := json.Unmarshal(rp, &parts); err != nil {
			return d, err
		}
		var pr dashboard.PanelOrRowPanel
		if parts.Type == "row" {
			pr.RowPanel = &dashboard.RowPanel{}
			if err := strictErr(pr.RowPanel.UnmarshalJSONStrict(rp)); err != nil {
				return d, fmt.Errorf("panels[%d]: %w", i, err)
			}
			if pr.RowPanel.Panels == nil {
				pr.RowPanel.Panels = []dashboard.Panel{} // [] decodes to nil
			}
			d.Panels = append(d.Panels, pr)
			continue
		}
		p := &dashboard.Panel{}
		if err := strictErr(p.UnmarshalJSONStrict(rp)); err != nil {
			return d, fmt.Errorf("panels[%d]: %w", i, err)
		}
		if parts.Options != nil {
			// The variant's loose decoder tells the concrete options type;
			// a fresh value of it decodes strictly.
			cfg, ok := cog.ConfigForPanelcfgVariant(parts.Type)
			if !ok || cfg.OptionsUnmarshaler == nil {
				return d, fmt.Errorf("panels[%d]: no options decoder for panel type %q", i, parts.Type)
			}
			loose, err := cfg.OptionsUnmarshaler(parts.Options)
			if err != nil {
				return d, fmt.Errorf("panels[%d].options: %w", i, err)
			}
			opts, ok := reflect.New(reflect.TypeOf(loose).Elem()).Interface().(strictUnmarshaler)
			if !ok {
				return d, fmt.Errorf("panels[%d]: %T has no strict decoder", i, loose)
			}
			if err := strictErr(opts.UnmarshalJSONStrict(parts.Options)); err != nil {
				return d, fmt.Errorf("panels[%d].options: %w", i, err)
			}
			p.Options = opts
		}
		p.Targets = nil
		for j, rt := range parts.Targets {
			q := &prometheus.Dataquery{}
			if err := strictErr(q.UnmarshalJSONStrict(rt)); err != nil {
				return d, fmt.Errorf("panels[%d].targets[%d]: %w", i, j, err)
			}
			p.Targets = append(p.Targets, q)
		}
		pr.Panel = p
		d.Panels = append(d.Panels, pr)
	}
	return d, nil
}

// jsonDiff lists the paths where two decoded JSON values differ (at most
// 20).
func jsonDiff(path string, a, b any, out []string) []string {
	if len(out) >= 20 || reflect.DeepEqual(a, b) {
		return out
	}
	am, ok1 := a.(map[string]any)
	bm, ok2 := b.(map[string]any)
	if ok1 && ok2 {
		for k, v := range am {
			out = jsonDiff(path+"."+k, v, bm[k], out)
		}
		for k, v := range bm {
			if _, ok := am[k]; !ok {
				out = append(out, fmt.Sprintf("%s.%s: absent before, %v after", path, k, v))
			}
		}
		return out
	}
	as, ok1 := a.([]any)
	bs, ok2 := b.([]any)
	if ok1 && ok2 && len(as) == len(bs) {
		for i := range as {
			out = jsonDiff(fmt.Sprintf("%s[%d]", path, i), as[i], bs[i], out)
		}
		return out
	}
	return append(out, fmt.Sprintf("%s: %v before, %v after", path, a, b))
}
