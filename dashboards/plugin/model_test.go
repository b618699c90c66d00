package plugin

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"

	"github.com/bermsec/berm/collector"
)

func TestModelParams(t *testing.T) {
	schema := collector.Schema{Database: "berm", Dialect: collector.Legacy}
	now := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		name    string
		model   map[string]any
		pinned  string
		tenants []string
		tools   []string
		err     string
	}{
		{name: "all", model: map[string]any{"tenant": "*", "tool": "$__all"}},
		{name: "lists", model: map[string]any{"tenant": "acme", "tool": "a, b,c"}, tenants: []string{"acme"}, tools: []string{"a", "b", "c"}},
		{name: "glob format", model: map[string]any{"tool": "{a,b}"}, tools: []string{"a", "b"}},
		{name: "All inside a list", model: map[string]any{"tool": "a,*"}},
		{name: "uninterpolated", model: map[string]any{"tool": "$tool"}, err: "not interpolated"},
		{name: "uninterpolated braces", model: map[string]any{"tenant": "${tenant:csv}"}, err: "not interpolated"},
		{name: "uninterpolated text", model: map[string]any{"text": "$text"}, err: "not interpolated"},
		{name: "a dollar in a value is data", model: map[string]any{"text": "cost $5 and ${x} more"}},
		{name: "pinned", model: map[string]any{}, pinned: "acme", tenants: []string{"acme"}},
		{name: "pinned, all asked", model: map[string]any{"tenant": "*"}, pinned: "acme", tenants: []string{"acme"}},
		{name: "pinned, its own asked", model: map[string]any{"tenant": "acme"}, pinned: "acme", tenants: []string{"acme"}},
		{name: "pinned, another asked", model: map[string]any{"tenant": "evil"}, pinned: "acme", err: "restricted to tenant acme"},
		{name: "pinned, a list with another", model: map[string]any{"tenant": "acme,evil"}, pinned: "acme", tenants: []string{"acme"}},
		{name: "two calls", model: map[string]any{"call": "a,b"}, err: "one value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.model["queryType"] = "calls"
			b, _ := json.Marshal(tc.model)
			q := backend.DataQuery{RefID: "A", JSON: b, Interval: 10 * time.Second, MaxDataPoints: 100,
				TimeRange: backend.TimeRange{From: now.Add(-time.Hour), To: now}}
			m, err := ParseModel(q)
			if err != nil {
				t.Fatal(err)
			}
			p, err := m.Params(q, schema, tc.pinned)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.Tenants, tc.tenants) || !slices.Equal(p.Tools, tc.tools) {
				t.Errorf("tenants %q tools %q, want %q %q", p.Tenants, p.Tools, tc.tenants, tc.tools)
			}
			// the step: the panel's interval, or wider when the range over max data points is
			if p.Bucket != 36*time.Second {
				t.Errorf("bucket %v, want 36s (1h / 100 points)", p.Bucket)
			}
		})
	}
}
