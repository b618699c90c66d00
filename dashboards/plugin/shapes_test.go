package plugin

import (
	"testing"

	"github.com/grafana/grafana-plugin-sdk-go/data"
)

// TestTheMatrixSaysWhyASurfaceIsDegraded: a degraded cell carries its calls' reasons (distinct,
// sorted); a violated cell its count; rows without a reasons column (an older query) the
// state alone.
func TestTheMatrixSaysWhyASurfaceIsDegraded(t *testing.T) {
	rows := func(reasons bool, rs ...[]any) *data.Frame {
		f := data.NewFrame("m", data.NewField("tool", nil, []string{}), data.NewField("surface", nil, []string{}),
			data.NewField("state", nil, []string{}), data.NewField("calls", nil, []uint64{}), data.NewField("violations", nil, []uint64{}))
		if reasons {
			f.Fields = append(f.Fields, data.NewField("reasons", nil, []string{}))
		}
		for _, r := range rs {
			if !reasons {
				r = r[:5]
			}
			f.AppendRow(r...)
		}
		return f
	}
	cases := []struct {
		name  string
		frame *data.Frame
		want  map[string]string // surface -> cell
	}{
		{"reasons of two calls, one repeated", rows(true,
			[]any{"git", "observability", "degraded", uint64(1), uint64(0), "events were lost: the trail is incomplete"},
			[]any{"git", "observability", "degraded", uint64(2), uint64(0), "events were lost: the trail is incomplete; landlock refused by the kernel: x"},
			[]any{"git", "isolation", "enforced", uint64(3), uint64(0), ""}),
			map[string]string{"observability": "degraded: events were lost: the trail is incomplete; landlock refused by the kernel: x", "isolation": "enforced"}},
		{"a violation outranks the reason", rows(true,
			[]any{"git", "policy", "degraded", uint64(1), uint64(2), "landlock refused by the kernel: x"}),
			map[string]string{"policy": "violated ×2"}},
		{"no reasons column", rows(false,
			[]any{"git", "observability", "degraded", uint64(1), uint64(0), ""}),
			map[string]string{"observability": "degraded"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := matrix("matrix", c.frame)
			if m.Rows() != 1 {
				t.Fatalf("%d rows", m.Rows())
			}
			for s, want := range c.want {
				if got := str(m, s, 0); got != want {
					t.Errorf("%s: %q, want %q", s, got, want)
				}
			}
		})
	}
}

// TestTheMatrixSaysACredentialSurfaceWasInjected: the calls whose secrets berm's egress
// injected (the inject column: their surface had the inject layer) read "enforced (inject)",
// some of them "(inject k/n)"; rows without the column (an older query) the state alone.
func TestTheMatrixSaysACredentialSurfaceWasInjected(t *testing.T) {
	rows := func(inject bool, rs ...[]any) *data.Frame {
		f := data.NewFrame("m", data.NewField("tool", nil, []string{}), data.NewField("surface", nil, []string{}),
			data.NewField("state", nil, []string{}), data.NewField("calls", nil, []uint64{}), data.NewField("violations", nil, []uint64{}))
		if inject {
			f.Fields = append(f.Fields, data.NewField("inject", nil, []uint64{}))
		}
		for _, r := range rs {
			if !inject {
				r = r[:5]
			}
			f.AppendRow(r...)
		}
		return f
	}
	cases := []struct {
		name  string
		frame *data.Frame
		want  map[string]string // surface -> cell
	}{
		{"every call injected", rows(true,
			[]any{"gh", "credential", "enforced", uint64(2), uint64(0), uint64(2)},
			[]any{"gh", "isolation", "enforced", uint64(2), uint64(0), uint64(0)}),
			map[string]string{"credential": "enforced (inject)", "isolation": "enforced"}},
		{"one call of three injected", rows(true,
			[]any{"gh", "credential", "enforced", uint64(3), uint64(0), uint64(1)}),
			map[string]string{"credential": "enforced (inject 1/3)"}},
		{"a violation keeps the layer", rows(true,
			[]any{"gh", "credential", "enforced", uint64(1), uint64(2), uint64(1)}),
			map[string]string{"credential": "violated ×2 (inject)"}},
		{"no inject column", rows(false,
			[]any{"gh", "credential", "enforced", uint64(1), uint64(0), uint64(1)}),
			map[string]string{"credential": "enforced"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := matrix("matrix", c.frame)
			for s, want := range c.want {
				if got := str(m, s, 0); got != want {
					t.Errorf("%s: %q, want %q", s, got, want)
				}
			}
		})
	}
}
