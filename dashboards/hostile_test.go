package dashboards

import (
	"slices"
	"strings"
	"testing"

	"github.com/grafana/grafana-plugin-sdk-go/backend"
	"github.com/grafana/grafana-plugin-sdk-go/experimental/datasourcetest"
)

// checkHostile is what a tool inside the sandbox, or a neighbour tenant, would try against the
// dashboards: a planted file name full of SQL and template syntax, filters that try to break
// out of their quotes, and a tenant-restricted datasource asked for another tenant's calls.
func (f *fixture) checkHostile(t *testing.T, c *datasourcetest.TestPluginClient, pc backend.PluginContext) {
	// the planted name is data: searching for it finds the one call that touched it
	got := col(t, f.must(t, c, pc, map[string]any{"queryType": "calls", "text": hostileName})[0], "call_id")
	if !slices.Equal(got, []string{"neighbour"}) {
		t.Errorf("free text %q: %v, want the neighbour's call only", hostileName, got)
	}
	for _, q := range []map[string]any{
		{"queryType": "calls", "tenant": "acme') OR (1=1"},
		{"queryType": "calls", "tool": `x\' OR 1=1 --`},
		{"queryType": "calls", "text": `\' OR 1=1 --`},
		{"queryType": "call_summary", "call": `' OR call_key != '`},
		{"queryType": "timeline", "call": `x' OR 1=1 OR '`},
	} {
		fr, err := f.ask(t, c, pc, q)
		if err != nil {
			t.Errorf("%v: %v (a quote in a filter must be data, not an error)", q, err)
			continue
		}
		if n := fr[0].Rows(); n != 0 {
			t.Errorf("%v: %d rows, want none: the filter escaped its quotes", q, n)
		}
	}
	if _, err := f.ask(t, c, pc, map[string]any{"queryType": "calls", "tool": "$tool"}); err == nil || !strings.Contains(err.Error(), "not interpolated") {
		t.Errorf("an uninterpolated variable: %v", err)
	}

	// a datasource restricted to acme shows nothing of evil's, whatever the panel asks
	acme := pluginCtx("berm-acme", map[string]string{"dsn": f.dsn, "tenant": "acme"})
	for _, q := range []map[string]any{
		{"queryType": "calls"},
		{"queryType": "calls", "tenant": "*"},
		{"queryType": "calls", "text": hostileName},
		{"queryType": "egress_denials"},
		{"queryType": "matrix"},
		{"queryType": "first_seen", "tool": "planter"},
		{"queryType": "timeline", "call": f.keys["neighbour"]},
		{"queryType": "call_summary", "call": f.keys["neighbour"]},
		{"queryType": "process_tree", "call": f.keys["neighbour"]},
		{"queryType": "call_network", "call": "neighbour"},
		{"queryType": "values", "field": "tenant"},
		{"queryType": "values", "field": "call"},
	} {
		frames := f.must(t, c, acme, q)
		for _, fr := range frames {
			for i := 0; i < fr.Rows(); i++ {
				for k, v := range row(fr, i) {
					if v == "evil" || v == "planter" || v == f.keys["neighbour"] || strings.Contains(v, "203.0.113.7") || strings.Contains(v, "OR 1=1") {
						t.Errorf("tenant-restricted %v: row %d has %s = %q of the neighbour tenant", q, i, k, v)
					}
				}
			}
		}
	}
	if n := f.must(t, c, acme, map[string]any{"queryType": "calls"})[0].Rows(); n != 4 {
		t.Errorf("acme's own calls through its datasource: %d, want 4", n)
	}
	if _, err := f.ask(t, c, acme, map[string]any{"queryType": "calls", "tenant": "evil"}); err == nil || !strings.Contains(err.Error(), "restricted to tenant acme") {
		t.Errorf("asking a restricted datasource for another tenant: %v", err)
	}
}
