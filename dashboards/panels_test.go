package dashboards

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/grafana/grafana-plugin-sdk-go/backend"
	"github.com/grafana/grafana-plugin-sdk-go/experimental/datasourcetest"

	"github.com/bermsec/berm/dashboards/internal/board"
)

// mayBeEmpty are the panels the fixture's calls give no rows (nothing is missing or stuck, the
// picked call made no connection).
var mayBeEmpty = map[string]bool{
	"berm-agent/Backlog: calls without a record": true,
	"berm-agent/Incomplete calls":                true,
	"berm-call/Network":                          true,
	// this fixture's calls hold no action for approval and make no DNS query: TestDaemonPanels
	// has calls that do, and checks these panels' content
	"berm-call/Approvals":                        true,
	"berm-call/DNS queries":                      true,
	"berm-escape/Egress: DNS queries":            true,
	"berm-escape/Egress: DNS queries by verdict": true,
	"berm-escape/Approval refusals":              true,
	"berm-escape/DNS refusals":                   true,
	"berm-escape/DNS tunnelling alerts":          true,
}

func (f *fixture) panelVars() map[string]string {
	return map[string]string{"datasource": "berm", "tenant": "*", "tool": "*", "host": "*", "surface": "*",
		"call": f.keys["alert"], "prometheus": "prometheus", "instance": ".*"}
}

// bermTargets are the berm queries of every panel of every dashboard, interpolated as the
// frontend sends them, keyed "uid/title".
func (f *fixture) bermTargets(t *testing.T, ds []dash) map[string][]map[string]any {
	out := map[string][]map[string]any{}
	for _, d := range ds {
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				if tg.Datasource.Type == board.PluginID {
					key := d.UID + "/" + p.Title
					out[key] = append(out[key], interpolate(t, tg.raw, f.panelVars()).(map[string]any))
				}
			}
		}
	}
	return out
}

// checkPanels runs every panel's query of every dashboard and checks its frames: fields, rows,
// and the shape the panel's type needs.
func (f *fixture) checkPanels(t *testing.T, c *datasourcetest.TestPluginClient, pc backend.PluginContext) {
	ds := loadAll(t)
	types := map[string]string{}
	for _, d := range ds {
		for _, p := range d.Panels {
			types[d.UID+"/"+p.Title] = p.Type
		}
	}
	targets := f.bermTargets(t, ds)
	if len(targets) < 25 {
		t.Fatalf("only %d berm panels", len(targets))
	}
	for key, qs := range targets {
		for _, q := range qs {
			frames, err := f.ask(t, c, pc, q)
			if err != nil {
				t.Errorf("%s: %v", key, err)
				continue
			}
			rows := 0
			for _, fr := range frames {
				if len(fr.Fields) == 0 {
					t.Errorf("%s: frame %s has no fields", key, fr.Name)
				}
				rows += fr.Rows()
			}
			if rows == 0 && !mayBeEmpty[key] {
				t.Errorf("%s (%s): no rows from the fixture's calls", key, q["queryType"])
			}
			switch types[key] {
			case "timeseries":
				if frames[0].Fields[0].Name != "time" || len(frames[0].Fields) < 2 {
					t.Errorf("%s: a time series needs time and values, has %d fields", key, len(frames[0].Fields))
				}
			case "nodeGraph":
				if len(frames) != 2 || frames[0].Name != "nodes" || frames[1].Name != "edges" {
					t.Errorf("%s: a node graph needs nodes and edges frames", key)
				}
			case "logs":
				if frames[0].Fields[0].Name != "time" || frames[0].Fields[1].Name != "body" {
					t.Errorf("%s: logs need time and body first", key)
				}
			case "stat":
				if frames[0].Rows() != 1 {
					t.Errorf("%s: a stat's query gives one row, has %d", key, frames[0].Rows())
				}
			}
		}
	}
	// the variables' queries
	for _, d := range ds {
		for _, v := range d.Templating.List {
			q, ok := v.Query.(map[string]any)
			if !ok || v.Type != "query" {
				continue
			}
			q = interpolate(t, q, f.panelVars()).(map[string]any)
			fr := f.must(t, c, pc, q)
			if fr[0].Rows() == 0 || len(fr[0].Fields) != 2 {
				t.Errorf("%s: variable %s: %d rows, %d fields", d.UID, v.Name, fr[0].Rows(), len(fr[0].Fields))
			}
		}
	}
}

// TestPrometheusPanelMetrics: every metric the agent-health dashboard's Prometheus panels read
// is one berm registers (a renamed metric would leave its panel empty).
func TestPrometheusPanelMetrics(t *testing.T) {
	registered := map[string]bool{}
	name := regexp.MustCompile(`Name:\s*"(berm_\w+)"`)
	root := repoRoot()
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() && (d.Name() == "bin" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			b, _ := os.ReadFile(p)
			for _, m := range name.FindAllStringSubmatch(string(b), -1) {
				registered[m[1]] = true
			}
		}
		return nil
	})
	metric := regexp.MustCompile(`berm_\w+`)
	n := 0
	for _, d := range loadAll(t) {
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				for _, m := range metric.FindAllString(tg.Expr, -1) {
					n++
					base := strings.TrimSuffix(m, "_bucket")
					if !registered[base] {
						t.Errorf("%s: panel %q reads %s, which berm does not register", d.UID, p.Title, m)
					}
				}
			}
		}
	}
	if n < 10 {
		t.Fatalf("only %d metrics in the Prometheus panels", n)
	}
}
