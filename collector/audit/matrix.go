package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/bermsec/berm/agent/event"
)

// WorstFirst is the order of a matrix cell's classes, worst first: the cell shows the worst
// its tool's calls had on its surface in the window. The order is what on-call acts on:
//   - violated: something was refused, alerted on or capped there: an attempt happened,
//     whatever the protection; look at those calls first.
//   - degraded: protection someone configured is not in place (a layer the kernel refused,
//     events lost): the host needs fixing, and nobody chose it.
//   - absent: nothing bounds or records the surface: neither blocked nor would-be-denied
//     events exist, weaker than audit.
//   - audit: the policy records every would-be denial and blocks nothing, a mode somebody
//     chose and whose trail still shows what enforcement would have refused.
//   - enforced: bounded, nothing attributed.
var WorstFirst = []string{event.StateViolated, event.StateDegraded, event.StateAbsent, event.StateAudit, event.StateEnforced}

// MatrixRow is one group of the matrix's source rows: the calls of a tool whose surface had a
// state, violated or not. ClickHouse's matrix query (collector/query) and the journal
// (MatrixRows) give the same rows.
type MatrixRow struct {
	Tool, Surface, State string
	Violated             bool
	Calls, Violations    uint64
	// Inject: the calls of the group whose surface berm's injecting egress enforced (the
	// credential surface of calls whose injected secrets never entered them: layer inject).
	Inject uint64
}

// MatrixRows groups the finished calls' surfaces as the matrix query does. Calls without a
// record (running, or whose writer died) or written before records had surfaces are not in
// the matrix. surface, when set, keeps that surface's rows only.
func MatrixRows(calls []Call, surface string) []MatrixRow {
	type key struct {
		tool, surface, state string
		violated             bool
	}
	groups := map[key]*MatrixRow{}
	for _, c := range calls {
		if c.Record == nil {
			continue
		}
		for _, s := range c.Record.Surfaces {
			if surface != "" && s.Surface != surface {
				continue
			}
			k := key{c.Record.Tool, s.Surface, s.State, s.Violations > 0}
			r := groups[k]
			if r == nil {
				r = &MatrixRow{Tool: k.tool, Surface: k.surface, State: k.state, Violated: k.violated}
				groups[k] = r
			}
			r.Calls++
			r.Violations += s.Violations
			if slices.Contains(s.Layers, event.LayerInject) {
				r.Inject++
			}
		}
	}
	out := make([]MatrixRow, 0, len(groups))
	for _, r := range groups {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Tool != b.Tool {
			return a.Tool < b.Tool
		}
		if a.Surface != b.Surface {
			return a.Surface < b.Surface
		}
		if a.State != b.State {
			return a.State < b.State
		}
		return !a.Violated && b.Violated
	})
	return out
}

// Matrix is the tools x surfaces matrix: a row per tool, a cell per surface.
type Matrix struct {
	Surfaces []string     `json:"surfaces"` // the columns, in event.Surfaces order
	Order    []string     `json:"order"`    // the cells' classes, worst first (WorstFirst)
	Tools    []MatrixTool `json:"tools"`    // by name
}

// MatrixTool is one row of the matrix.
type MatrixTool struct {
	Tool  string `json:"tool"`
	Calls uint64 `json:"calls"` // calls of the tool in the matrix
	Cells []Cell `json:"cells"` // one per surface, in Matrix.Surfaces order
}

// Cell is a tool's surface over the window.
type Cell struct {
	Surface string `json:"surface"`
	// Worst is the worst class of the tool's calls there (WorstFirst), Count how many calls
	// were in it, of Calls.
	Worst string `json:"worst"`
	Count uint64 `json:"count"`
	Calls uint64 `json:"calls"`
	// States: calls per state, violated or not; Violated: calls with violations there;
	// Violations: denials, alerts and cap hits attributed to the surface.
	States     map[string]uint64 `json:"states"`
	Violated   uint64            `json:"violated"`
	Violations uint64            `json:"violations"`
	// Reasons: why the cell's degraded calls were degraded (the records' surface reason:
	// the layer missing and the rules it leaves unenforced), calls per reason.
	Reasons map[string]uint64 `json:"reasons,omitempty"`
	// Inject: of Calls, those whose surface berm's injecting egress enforced (layer inject:
	// the credential surface of calls whose secrets stayed outside, agent/inject).
	Inject uint64 `json:"inject,omitempty"`
}

// Label is the cell's class with the layer that enforced it when that says more than the
// state: "enforced (inject)" for a credential surface whose every call had its secrets
// injected on the way out, "enforced (inject 2/5)" for some of them.
func (c Cell) Label() string {
	return c.Worst + InjectNote(c.Inject, c.Calls)
}

// InjectNote is " (inject)" when all calls of a cell had the inject layer, " (inject k/n)"
// when k of them did, "" when none did.
func InjectNote(inject, calls uint64) string {
	switch {
	case inject == 0:
		return ""
	case inject >= calls:
		return " (" + event.LayerInject + ")"
	}
	return fmt.Sprintf(" (%s %d/%d)", event.LayerInject, inject, calls)
}

// MatrixReason is why some calls of a tool had a surface degraded: the records' reason and
// how many calls gave it.
type MatrixReason struct {
	Tool, Surface, Reason string
	Calls                 uint64
}

// MatrixReasons groups the degraded surfaces of finished calls by tool, surface and reason,
// as the ClickHouse query does (query.MatrixReasons).
func MatrixReasons(calls []Call, surface string) []MatrixReason {
	type key struct{ tool, surface, reason string }
	groups := map[key]uint64{}
	for _, c := range calls {
		if c.Record == nil {
			continue
		}
		for _, s := range c.Record.Surfaces {
			if s.State != event.StateDegraded || surface != "" && s.Surface != surface {
				continue
			}
			groups[key{c.Record.Tool, s.Surface, s.Reason}]++
		}
	}
	out := make([]MatrixReason, 0, len(groups))
	for k, n := range groups {
		out = append(out, MatrixReason{Tool: k.tool, Surface: k.surface, Reason: k.reason, Calls: n})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Tool != b.Tool {
			return a.Tool < b.Tool
		}
		if a.Surface != b.Surface {
			return a.Surface < b.Surface
		}
		return a.Reason < b.Reason
	})
	return out
}

// AddReasons puts the degraded surfaces' reasons in their cells.
func (m *Matrix) AddReasons(rs []MatrixReason) {
	for _, r := range rs {
		i := slices.Index(m.Surfaces, r.Surface)
		if i < 0 {
			continue
		}
		for ti := range m.Tools {
			t := &m.Tools[ti]
			if t.Tool != r.Tool {
				continue
			}
			c := &t.Cells[i]
			if c.Reasons == nil {
				c.Reasons = map[string]uint64{}
			}
			reason := r.Reason
			if reason == "" {
				reason = "no reason recorded"
			}
			c.Reasons[reason] += r.Calls
		}
	}
}

// FoldMatrix makes the matrix of the source rows.
func FoldMatrix(rows []MatrixRow) Matrix {
	m := Matrix{Surfaces: event.Surfaces, Order: WorstFirst, Tools: []MatrixTool{}}
	byTool := map[string]*MatrixTool{}
	var tools []string
	for _, r := range rows {
		t := byTool[r.Tool]
		if t == nil {
			t = &MatrixTool{Tool: r.Tool, Cells: make([]Cell, len(event.Surfaces))}
			for i, s := range event.Surfaces {
				t.Cells[i] = Cell{Surface: s, States: map[string]uint64{}}
			}
			byTool[r.Tool] = t
			tools = append(tools, r.Tool)
		}
		i := slices.Index(event.Surfaces, r.Surface)
		if i < 0 {
			continue // a surface this berm does not know: not a column
		}
		c := &t.Cells[i]
		c.Calls += r.Calls
		c.States[r.State] += r.Calls
		c.Inject += r.Inject
		if r.Violated {
			c.Violated += r.Calls
			c.Violations += r.Violations
		}
	}
	sort.Strings(tools)
	for _, name := range tools {
		t := byTool[name]
		for i := range t.Cells {
			c := &t.Cells[i]
			t.Calls = max(t.Calls, c.Calls)
			c.Worst, c.Count = worst(c)
		}
		m.Tools = append(m.Tools, *t)
	}
	return m
}

// worst is the cell's worst class and its calls. A state no class names (from a newer berm)
// counts as degraded: unknown is not fine.
func worst(c *Cell) (string, uint64) {
	if c.Violated > 0 {
		return event.StateViolated, c.Violated
	}
	counts := map[string]uint64{}
	for st, n := range c.States {
		if !slices.Contains(WorstFirst, st) {
			st = event.StateDegraded
		}
		counts[st] += n
	}
	for _, cls := range WorstFirst {
		if counts[cls] > 0 {
			return cls, counts[cls]
		}
	}
	return "", 0
}

// PrintMatrixJSON writes the matrix as one JSON object.
func PrintMatrixJSON(w io.Writer, m Matrix) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(m)
}

// cellColours are the ANSI colours of the classes on a terminal.
var cellColours = map[string]string{
	event.StateViolated: "1;31", // bold red
	event.StateDegraded: "33",   // yellow
	event.StateAbsent:   "35",   // magenta
	event.StateAudit:    "36",   // cyan
	event.StateEnforced: "32",   // green
}

// PrintMatrix writes the matrix as a table: a cell is its worst class, the calls in it of the
// tool's calls, and !N the violations attributed there. colour: ANSI colours (a terminal).
// Tool names are printed through Safe.
func PrintMatrix(w io.Writer, m Matrix, colour bool) error {
	head := []string{"TOOL", "CALLS"}
	for _, s := range m.Surfaces {
		head = append(head, strings.ToUpper(s))
	}
	table := [][]string{head}
	classes := [][]string{make([]string, len(head))}
	// Each degraded reason is a footnote, numbered in the order the cells show them.
	var notes []string
	noteCalls := map[string]uint64{}
	for _, t := range m.Tools {
		row := []string{Safe(t.Tool), fmt.Sprint(t.Calls)}
		cls := []string{"", ""}
		for _, c := range t.Cells {
			cell := "-"
			if c.Calls > 0 {
				cell = fmt.Sprintf("%s %d/%d", c.Label(), c.Count, c.Calls)
				if c.Violations > 0 {
					cell += fmt.Sprintf(" !%d", c.Violations)
				}
				var refs []string
				for _, reason := range slices.Sorted(maps.Keys(c.Reasons)) {
					n := slices.Index(notes, reason)
					if n < 0 {
						notes = append(notes, reason)
						n = len(notes) - 1
					}
					noteCalls[reason] += c.Reasons[reason]
					refs = append(refs, fmt.Sprint(n+1))
				}
				if len(refs) > 0 {
					cell += " [" + strings.Join(refs, ",") + "]"
				}
			}
			row = append(row, cell)
			cls = append(cls, c.Worst)
		}
		table = append(table, row)
		classes = append(classes, cls)
	}
	widths := make([]int, len(head))
	for _, row := range table {
		for i, s := range row {
			widths[i] = max(widths[i], utf8.RuneCountInString(s))
		}
	}
	var b strings.Builder
	for r, row := range table {
		for i, s := range row {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(s))
			if colour && classes[r][i] != "" {
				s = "\033[" + cellColours[classes[r][i]] + "m" + s + "\033[0m"
			}
			if i < len(row)-1 {
				s += pad + "  "
			}
			b.WriteString(s)
		}
		b.WriteString("\n")
	}
	if len(m.Tools) == 0 {
		b.WriteString("(no finished calls with surfaces in the window)\n")
	}
	if len(notes) > 0 {
		b.WriteString("\ndegraded, why:\n")
		for i, reason := range notes {
			fmt.Fprintf(&b, "  [%d] %s (%d calls)\n", i+1, Safe(reason), noteCalls[reason])
		}
	}
	if absent := absentEverywhere(m); len(absent) > 0 {
		fmt.Fprintf(&b, "\nabsent for every call: %s (nothing enforced them).\n", strings.Join(absent, ", "))
	}
	fmt.Fprintf(&b, "\nworst first: %s. n/m: calls of the tool in that class; !k: denials, alerts and cap hits.\n",
		strings.Join(m.Order, " > "))
	if injected(m) {
		b.WriteString("(inject): the calls' secrets never entered them; berm's egress put them into their requests (k/n: k of the n calls).\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// MatrixSource is a source that groups the matrix's rows itself (ClickHouse, in SQL).
type MatrixSource interface {
	MatrixRows(f Filter, surface string) ([]MatrixRow, error)
}

// SourceMatrixRows are the matrix's rows from src: its own grouping, or MatrixRows of its
// calls.
func SourceMatrixRows(src Source, f Filter, surface string) ([]MatrixRow, error) {
	if ms, ok := src.(MatrixSource); ok {
		return ms.MatrixRows(f, surface)
	}
	calls, err := src.Calls(f)
	if err != nil {
		return nil, err
	}
	return MatrixRows(calls, surface), nil
}

// MatrixReasonSource is a source that groups the degraded surfaces' reasons itself
// (ClickHouse, in SQL).
type MatrixReasonSource interface {
	MatrixReasons(f Filter, surface string) ([]MatrixReason, error)
}

// SourceMatrixReasons are the degraded surfaces' reasons from src: its own grouping, or
// MatrixReasons of its calls.
func SourceMatrixReasons(src Source, f Filter, surface string) ([]MatrixReason, error) {
	if ms, ok := src.(MatrixReasonSource); ok {
		return ms.MatrixReasons(f, surface)
	}
	calls, err := src.Calls(f)
	if err != nil {
		return nil, err
	}
	return MatrixReasons(calls, surface), nil
}

// Only is the matrix with one surface's column.
func (m Matrix) Only(surface string) Matrix {
	i := slices.Index(m.Surfaces, surface)
	if i < 0 {
		return m
	}
	out := Matrix{Surfaces: []string{surface}, Order: m.Order, Tools: make([]MatrixTool, 0, len(m.Tools))}
	for _, t := range m.Tools {
		t.Cells = []Cell{t.Cells[i]}
		out.Tools = append(out.Tools, t)
	}
	return out
}

// injected: a cell of the matrix had calls with the inject layer.
func injected(m Matrix) bool {
	for _, t := range m.Tools {
		for _, c := range t.Cells {
			if c.Inject > 0 {
				return true
			}
		}
	}
	return false
}

// absentEverywhere are the surfaces no call of the matrix had anything but absent on (and
// no violation): said plainly, they are not a colour to get used to.
func absentEverywhere(m Matrix) []string {
	var out []string
	for i, s := range m.Surfaces {
		all := len(m.Tools) > 0
		for _, t := range m.Tools {
			c := t.Cells[i]
			all = all && c.States[event.StateAbsent] == c.Calls && c.Violated == 0
		}
		if all {
			out = append(out, s)
		}
	}
	return out
}
