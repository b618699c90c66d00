package audit

import (
	"bytes"
	"strings"
	"testing"

	"github.com/bermsec/berm/agent/event"
)

func surfacesOf(states map[string]string, violations map[string]uint64) []event.SurfaceState {
	var out []event.SurfaceState
	for _, s := range event.Surfaces {
		st := states[s]
		if st == "" {
			st = event.StateEnforced
		}
		out = append(out, event.SurfaceState{Surface: s, State: st, Violations: violations[s], Violated: violations[s] > 0})
	}
	return out
}

func TestFoldMatrixWorstFirst(t *testing.T) {
	call := func(tool string, states map[string]string, violations map[string]uint64) Call {
		return Call{Start: event.CallStart{Tool: tool}, Record: &event.CallRecord{CallStart: event.CallStart{Tool: tool}, Surfaces: surfacesOf(states, violations)}}
	}
	tests := []struct {
		name  string
		calls []Call
		worst string // the policy cell's
		count uint64
		viol  uint64
	}{
		{"all enforced", []Call{call("t", nil, nil), call("t", nil, nil)}, event.StateEnforced, 2, 0},
		{"audit beats enforced", []Call{call("t", nil, nil), call("t", map[string]string{"policy": "audit"}, nil)}, event.StateAudit, 1, 0},
		{"absent beats audit", []Call{call("t", map[string]string{"policy": "absent"}, nil), call("t", map[string]string{"policy": "audit"}, nil)}, event.StateAbsent, 1, 0},
		{"degraded beats absent", []Call{call("t", map[string]string{"policy": "absent"}, nil), call("t", map[string]string{"policy": "degraded"}, nil)}, event.StateDegraded, 1, 0},
		{"violated beats everything, whatever its state", []Call{
			call("t", map[string]string{"policy": "degraded"}, nil),
			call("t", nil, map[string]uint64{"policy": 3}),
			call("t", map[string]string{"policy": "audit"}, map[string]uint64{"policy": 2}),
		}, event.StateViolated, 2, 5},
		{"an unknown state counts as degraded", []Call{call("t", map[string]string{"policy": "quantum"}, nil), call("t", map[string]string{"policy": "absent"}, nil)}, event.StateDegraded, 1, 0},
		{"a call without a record or surfaces is not in the matrix", []Call{
			call("t", map[string]string{"policy": "audit"}, nil),
			{Start: event.CallStart{Tool: "t"}},
			{Start: event.CallStart{Tool: "t"}, Record: &event.CallRecord{CallStart: event.CallStart{Tool: "t"}}},
		}, event.StateAudit, 1, 0},
	}
	policy := 2 // event.Surfaces index
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := FoldMatrix(MatrixRows(tt.calls, ""))
			if len(m.Tools) != 1 {
				t.Fatalf("tools: %+v", m.Tools)
			}
			c := m.Tools[0].Cells[policy]
			if c.Surface != event.SurfacePolicy || c.Worst != tt.worst || c.Count != tt.count || c.Violations != tt.viol {
				t.Errorf("policy cell %+v, want worst %s count %d violations %d", c, tt.worst, tt.count, tt.viol)
			}
			if iso := m.Tools[0].Cells[0]; iso.Worst != event.StateEnforced || iso.Calls != m.Tools[0].Calls {
				t.Errorf("isolation cell %+v", iso)
			}
		})
	}
}

// A tool name is the caller's text: printed escaped, it cannot forge a row or colour the
// terminal; colours go only around cells, and columns line up with and without them.
func TestPrintMatrixEscapesAndColours(t *testing.T) {
	hostile := "evil\n\033[32mbenign"
	calls := []Call{
		{Record: &event.CallRecord{CallStart: event.CallStart{Tool: hostile}, Surfaces: surfacesOf(nil, map[string]uint64{"policy": 1})}},
		{Record: &event.CallRecord{CallStart: event.CallStart{Tool: "ok"}, Surfaces: surfacesOf(map[string]string{"credential": "absent"}, nil)}},
	}
	m := FoldMatrix(MatrixRows(calls, ""))
	var plain, colour bytes.Buffer
	if err := PrintMatrix(&plain, m, false); err != nil {
		t.Fatal(err)
	}
	if err := PrintMatrix(&colour, m, true); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain.String(), "\033") {
		t.Errorf("plain output has escape sequences:\n%q", plain.String())
	}
	lines := strings.Split(plain.String(), "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[1], `evil\n\033[32mbenign  1      enforced 1/1`) || !strings.Contains(lines[1], "violated 1/1 !1") {
		t.Errorf("hostile row not escaped on one line:\n%s", plain.String())
	}
	stripped := colour.String()
	for _, c := range cellColours {
		stripped = strings.ReplaceAll(stripped, "\033["+c+"m", "")
	}
	stripped = strings.ReplaceAll(stripped, "\033[0m", "")
	if stripped != plain.String() {
		t.Errorf("coloured output, colours removed, is not the plain output:\n%q\n%q", stripped, plain.String())
	}
	if !strings.Contains(colour.String(), "\033[1;31mviolated 1/1 !1\033[0m") || !strings.Contains(colour.String(), "\033[35mabsent 1/1\033[0m") {
		t.Errorf("cells not coloured by class:\n%q", colour.String())
	}
}

func TestPrintMatrixSaysAbsentPlainly(t *testing.T) {
	calls := []Call{
		{Record: &event.CallRecord{CallStart: event.CallStart{Tool: "a"}, Surfaces: surfacesOf(map[string]string{"credential": "absent", "approval": "absent"}, nil)}},
		{Record: &event.CallRecord{CallStart: event.CallStart{Tool: "b"}, Surfaces: surfacesOf(map[string]string{"credential": "absent", "approval": "absent"}, map[string]uint64{"approval": 1})}},
		{Record: &event.CallRecord{CallStart: event.CallStart{Tool: "b"}, Surfaces: surfacesOf(map[string]string{"credential": "absent", "policy": "absent"}, nil)}},
	}
	var b bytes.Buffer
	if err := PrintMatrix(&b, FoldMatrix(MatrixRows(calls, "")), false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "\nabsent for every call: credential (nothing enforced them).\n") {
		t.Errorf("credential alone is absent for every call (approval was violated once, policy enforced once):\n%s", b.String())
	}
}

// A degraded cell says why: each reason the records give is a numbered footnote under the
// table, with its calls; a reason is the record's text, printed escaped.
func TestPrintMatrixFootnotesWhyACellIsDegraded(t *testing.T) {
	degraded := func(tool string, reasons map[string]string) Call {
		ss := surfacesOf(nil, nil)
		for i := range ss {
			if r, ok := reasons[ss[i].Surface]; ok {
				ss[i].State, ss[i].Reason = event.StateDegraded, r
			}
		}
		return Call{Record: &event.CallRecord{CallStart: event.CallStart{Tool: tool}, Surfaces: ss}}
	}
	const lsm = "bpf-lsm refused by lockdown: spec.filesystem.deny unenforced"
	calls := []Call{
		degraded("a", map[string]string{"policy": lsm}),
		degraded("a", map[string]string{"policy": lsm}),
		degraded("b", map[string]string{"policy": lsm, "observability": "events lost\n\033[31m"}),
		degraded("b", nil),
	}
	for _, tc := range []struct {
		name    string
		surface string
		want    []string // lines the output holds
		not     []string
	}{
		{"every degraded cell points at its reasons", "", []string{
			"degraded 2/2 [1]",
			"degraded 1/2 [1]",
			"degraded 1/2 [2]",
			"degraded, why:\n  [1] " + lsm + " (3 calls)\n  [2] events lost\\n\\033[31m (1 calls)\n",
		}, []string{"\033"}},
		{"one surface's column has its own reasons only", "policy", []string{"  [1] " + lsm + " (3 calls)\n"}, []string{"[2]", "events lost"}},
		{"no degraded cell, no footnotes", "isolation", nil, []string{"degraded, why"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := FoldMatrix(MatrixRows(calls, tc.surface))
			if tc.surface != "" {
				m = m.Only(tc.surface)
			}
			m.AddReasons(MatrixReasons(calls, tc.surface))
			var b bytes.Buffer
			if err := PrintMatrix(&b, m, false); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, b.String())
				}
			}
			for _, n := range tc.not {
				if strings.Contains(b.String(), n) {
					t.Errorf("output has %q:\n%s", n, b.String())
				}
			}
		})
	}
}

// A credential surface enforced by berm's injecting egress (layer inject) reads
// "enforced (inject)" in the printed matrix, "(inject k/n)" when only some calls of the cell
// had it; other surfaces and calls without the layer read as before.
func TestTheMatrixNamesTheInjectLayer(t *testing.T) {
	call := func(tool string, inject bool) Call {
		ss := surfacesOf(nil, nil)
		for i := range ss {
			if ss[i].Surface == event.SurfaceCredential && inject {
				ss[i].Layers = []string{event.LayerCredentials, event.LayerInject}
			}
		}
		return Call{Record: &event.CallRecord{CallStart: event.CallStart{Tool: tool}, Surfaces: ss}}
	}
	tests := []struct {
		name  string
		calls []Call
		want  string // the credential cell, printed
	}{
		{"every call injected", []Call{call("t", true), call("t", true)}, "enforced (inject) 2/2"},
		{"one call of two injected", []Call{call("t", true), call("t", false)}, "enforced (inject 1/2) 2/2"},
		{"no call injected", []Call{call("t", false)}, "enforced 1/1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := FoldMatrix(MatrixRows(tt.calls, ""))
			var b bytes.Buffer
			if err := PrintMatrix(&b, m.Only(event.SurfaceCredential), false); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), "  "+tt.want+"\n") {
				t.Errorf("matrix:\n%s\nwant the credential cell %q", b.String(), tt.want)
			}
			if strings.Contains(tt.want, "inject") != strings.Contains(b.String(), "(inject): the calls' secrets never entered them") {
				t.Errorf("the legend of (inject) is there exactly when a cell has it:\n%s", b.String())
			}
		})
	}
}
