package dashboards

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"slices"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"

	"github.com/bermsec/berm/collector/query"
	"github.com/bermsec/berm/dashboards/internal/board"
)

// TestDashboardsGenerated: the committed JSON is what go generate writes.
func TestDashboardsGenerated(t *testing.T) {
	for _, d := range board.All() {
		want, err := d.JSON()
		if err != nil {
			t.Fatal(err)
		}
		got, err := fs.ReadFile(Files, d.File)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go generate ./dashboards", d.File)
		}
	}
}

// TestDashboardsStrict reads every dashboard with the foundation SDK's strict unmarshalling
// (unknown fields and wrong types refused, panel options and queries by their plugin's
// schema) and validates it.
func TestDashboardsStrict(t *testing.T) {
	plugins.RegisterDefaultPlugins()
	files, _ := fs.Glob(Files, "*.json")
	if len(files) != 4 {
		t.Fatalf("want 4 dashboards, have %v", files)
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			b, _ := fs.ReadFile(Files, f)
			var d dashboard.Dashboard
			if err := d.UnmarshalJSONStrict(b); err != nil {
				t.Fatalf("strict unmarshal: %v", err)
			}
			if err := d.Validate(); err != nil {
				t.Fatalf("validate: %v", err)
			}
			if len(d.Panels) == 0 {
				t.Fatal("no panels")
			}
		})
	}
}

// TestDashboardsQueryTypes: every berm target names a query type the plugin serves, and the
// variables every dashboard promises are there.
func TestDashboardsQueryTypes(t *testing.T) {
	var known []string
	for _, qt := range query.Types() {
		known = append(known, qt[0])
	}
	used := map[string]bool{}
	for _, d := range loadAll(t) {
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				if tg.Datasource.Type != board.PluginID {
					continue
				}
				if !slices.Contains(known, tg.QueryType) {
					t.Errorf("%s: panel %q: query type %q is not served", d.UID, p.Title, tg.QueryType)
				}
				used[tg.QueryType] = true
			}
		}
		var vars []string
		for _, v := range d.Templating.List {
			vars = append(vars, v.Name)
		}
		for _, want := range []string{"datasource", "tenant", "tool"} {
			if !slices.Contains(vars, want) {
				t.Errorf("%s: no variable %s (have %v)", d.UID, want, vars)
			}
		}
	}
	for _, qt := range known {
		if !used[qt] && qt != "values" && qt != "calls" {
			t.Errorf("query type %s is used by no panel", qt)
		}
	}
}

type target struct {
	RefID      string `json:"refId"`
	Datasource struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	QueryType string `json:"queryType"`
	Expr      string `json:"expr"`
	raw       map[string]any
}

type panel struct {
	ID      int      `json:"id"`
	Type    string   `json:"type"`
	Title   string   `json:"title"`
	Targets []target `json:"targets"`
}

type dash struct {
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// loadAll reads the dashboards, each target also as a map (the query as Grafana sends it).
func loadAll(t *testing.T) []dash {
	t.Helper()
	var out []dash
	files, _ := fs.Glob(Files, "*.json")
	for _, f := range files {
		b, _ := fs.ReadFile(Files, f)
		var d dash
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var raw struct {
			Panels []struct {
				Targets []map[string]any `json:"targets"`
			} `json:"panels"`
		}
		json.Unmarshal(b, &raw)
		for i := range d.Panels {
			for j := range d.Panels[i].Targets {
				d.Panels[i].Targets[j].raw = raw.Panels[i].Targets[j]
			}
		}
		out = append(out, d)
	}
	return out
}

// Grafana's conventions as a Grafana user expects them: every panel that draws numbers says
// in what unit, and every panel whose numbers mean loss or waiting (violations, incomplete
// trails, dropped events, held approvals, slow launches) turns colour where it matters.
func TestPanelsNameTheirUnitsAndLossesTheirThresholds(t *testing.T) {
	alarms := map[string]bool{
		"Calls with violations": true, "Incomplete records": true, "Dropped events": true,
		"Dropped events by where": true, "Ring buffer and queue usage": true, "Launch latency (p50, p99)": true,
		"Approvals pending": true, "Drops and incomplete records over time": true,
	}
	seen := map[string]bool{}
	for _, d := range board.All() {
		var dash struct {
			Panels []struct {
				Type, Title string
				FieldConfig struct {
					Defaults struct {
						Unit       string
						Thresholds *struct {
							Steps []struct {
								Color string
								Value *float64
							}
						}
					}
				}
			}
		}
		b, err := d.JSON()
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &dash); err != nil {
			t.Fatal(err)
		}
		for _, p := range dash.Panels {
			switch p.Type {
			case "timeseries", "stat", "bargauge", "gauge":
				if p.FieldConfig.Defaults.Unit == "" {
					t.Errorf("%s: panel %q (%s) names no unit", d.Title, p.Title, p.Type)
				}
			}
			if !alarms[p.Title] {
				continue
			}
			seen[p.Title] = true
			th := p.FieldConfig.Defaults.Thresholds
			if th == nil || len(th.Steps) < 2 || th.Steps[len(th.Steps)-1].Color == "green" || th.Steps[len(th.Steps)-1].Value == nil {
				t.Errorf("%s: panel %q has no threshold where it turns from green: %+v", d.Title, p.Title, th)
			}
		}
	}
	for title := range alarms {
		if !seen[title] {
			t.Errorf("no panel %q", title)
		}
	}
}
