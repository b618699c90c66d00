package plugin

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/data"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/collector/audit"
	"github.com/bermsec/berm/collector/query"
)

func column(f *data.Frame, name string) *data.Field {
	for _, fl := range f.Fields {
		if fl.Name == name {
			return fl
		}
	}
	return nil
}

func str(f *data.Frame, name string, i int) string {
	fl := column(f, name)
	if fl == nil {
		return ""
	}
	v, _ := fl.ConcreteAt(i)
	switch x := v.(type) {
	case string:
		return x
	case time.Time:
		return x.UTC().Format(time.RFC3339)
	}
	return fmt.Sprint(v)
}

func num(f *data.Frame, name string, i int) uint64 {
	n, _ := strconv.ParseUint(str(f, name, i), 10, 64)
	return n
}

// cell is a tool's state on a surface: the worst state of its calls, with counts.
type cell struct {
	state      string
	calls      uint64
	violations uint64
	reasons    []string // why the calls' surface was degraded
	inject     uint64   // calls whose surface berm's injecting egress enforced (layer inject)
}

func worse(a, b string) bool {
	return slices.Index(query.SurfaceStates, a) < slices.Index(query.SurfaceStates, b)
}

// matrix folds (tool, surface, state, calls, violations[, inject][, reasons]) rows into one row per
// tool and a column per surface whose value is the worst state, with the violations when there
// are any and a degraded state's reasons, and " (inject)" when the calls' secrets were
// injected on the way out (audit.InjectNote: " (inject k/n)" for k of them);
// "<surface> violations" columns carry the counts for sorting and links.
func matrix(name string, parts ...*data.Frame) *data.Frame {
	cells := map[string]map[string]*cell{}
	calls := map[string]uint64{}
	for _, f := range parts {
		for i := 0; i < f.Rows(); i++ {
			tool, surface, state := str(f, "tool", i), str(f, "surface", i), str(f, "state", i)
			if cells[tool] == nil {
				cells[tool] = map[string]*cell{}
			}
			c := cells[tool][surface]
			if c == nil {
				c = &cell{state: state}
				cells[tool][surface] = c
			}
			if worse(state, c.state) {
				c.state = state
			}
			c.calls += num(f, "calls", i)
			c.violations += num(f, "violations", i)
			c.inject += num(f, "inject", i)
			if state == event.StateDegraded {
				for _, r := range strings.Split(str(f, "reasons", i), "; ") {
					if r != "" && !slices.Contains(c.reasons, r) {
						c.reasons = append(c.reasons, r)
					}
				}
			}
		}
	}
	var tools []string
	for t, byS := range cells {
		tools = append(tools, t)
		for _, c := range byS {
			calls[t] = max(calls[t], c.calls)
		}
	}
	sort.Strings(tools)
	out := data.NewFrame(name, data.NewField("tool", nil, []string{}), data.NewField("calls", nil, []uint64{}))
	for _, s := range event.Surfaces {
		out.Fields = append(out.Fields, data.NewField(s, nil, []string{}))
	}
	for _, s := range event.Surfaces {
		out.Fields = append(out.Fields, data.NewField(s+" violations", nil, []uint64{}))
	}
	for _, t := range tools {
		row := []any{t, calls[t]}
		var counts []any
		for _, s := range event.Surfaces {
			c := cells[t][s]
			if c == nil { // only alerts, no call record in the range: nothing to say
				c = &cell{state: "absent"}
			}
			if c.violations > 0 {
				c.state = "violated"
			}
			v := c.state
			if c.violations > 0 {
				v = fmt.Sprintf("violated ×%d", c.violations)
			} else if c.state == event.StateDegraded && len(c.reasons) > 0 {
				slices.Sort(c.reasons)
				v += ": " + strings.Join(c.reasons, "; ") // on-call sees why, not only that
			}
			v += audit.InjectNote(c.inject, c.calls)
			row = append(row, v)
			counts = append(counts, c.violations)
		}
		out.AppendRow(append(row, counts...)...)
	}
	if len(parts) > 0 {
		out.Meta = parts[0].Meta
	}
	return out
}

// summary makes one call's row into (field, value) pairs, each surface's state after them.
func summary(row *data.Frame, surfaces *data.Frame) *data.Frame {
	out := data.NewFrame("summary", data.NewField("field", nil, []string{}), data.NewField("value", nil, []string{}))
	out.Meta = row.Meta
	if row.Rows() == 0 {
		out.AppendNotices(data.Notice{Severity: data.NoticeSeverityWarning, Text: "no such call in the range (pick a call, or widen the time range)"})
		return out
	}
	for _, f := range row.Fields {
		out.AppendRow(strings.ReplaceAll(f.Name, "_", " "), str(row, f.Name, 0))
	}
	if surfaces.Rows() > 0 {
		for _, s := range event.Surfaces {
			out.AppendRow("surface "+s, str(surfaces, s, 0))
		}
	}
	return out
}

var levels = map[string]string{
	string(event.KindDenial): "warning", string(event.KindAlert): "error", string(event.KindLimit): "error",
	string(event.KindDrop): "warning", string(event.KindReload): "info",
}

// logs makes a call's events log lines: a body that reads as a sentence, the level by kind.
func logs(f *data.Frame) *data.Frame {
	body := make([]string, f.Rows())
	level := make([]string, f.Rows())
	for i := range body {
		kind := str(f, "kind", i)
		var b strings.Builder
		fmt.Fprintf(&b, "%s pid %s", kind, str(f, "pid", i))
		if c := str(f, "comm", i); c != "" {
			fmt.Fprintf(&b, " (%s)", c)
		}
		for _, k := range []string{"syscall", "path", "address", "rule"} {
			if v := str(f, k, i); v != "" && v != "0" {
				if k == "address" && str(f, "port", i) != "0" {
					v += ":" + str(f, "port", i)
				}
				b.WriteString(" " + strconv.Quote(v)) // quoted: a path can hold anything, newlines too
			}
		}
		if e := str(f, "errno", i); e != "" {
			b.WriteString(" -> " + e)
		}
		if str(f, "phase", i) == event.PhaseSetup {
			b.WriteString(" [setup]")
		}
		body[i] = b.String()
		level[i] = levels[kind]
		if level[i] == "" {
			level[i] = "info"
		}
	}
	out := data.NewFrame(f.Name, column(f, "time"), data.NewField("body", nil, body), data.NewField("level", nil, level))
	out.Meta = f.Meta
	for _, fl := range f.Fields {
		if fl.Name != "time" {
			out.Fields = append(out.Fields, fl)
		}
	}
	out.Meta.PreferredVisualization = data.VisTypeLogs
	return out
}

// tree makes the node graph of a call's processes: a node per process (titled by what it
// executed last), an edge from each parent to each child.
func tree(f *data.Frame) data.Frames {
	type proc struct {
		exe, comm string
		execs     int
		exited    bool
	}
	procs := map[string]*proc{}
	var order []string
	get := func(pid string) *proc {
		p := procs[pid]
		if p == nil {
			p = &proc{}
			procs[pid] = p
			order = append(order, pid)
		}
		return p
	}
	edges := map[[2]string]bool{}
	var edgeOrder [][2]string
	edge := func(parent, child string) {
		e := [2]string{parent, child}
		if parent == "0" || parent == child || edges[e] {
			return
		}
		edges[e] = true
		edgeOrder = append(edgeOrder, e)
	}
	for i := 0; i < f.Rows(); i++ {
		pid := str(f, "pid", i)
		p := get(pid)
		if c := str(f, "comm", i); c != "" && p.comm == "" {
			p.comm = c
		}
		switch str(f, "kind", i) {
		case string(event.KindFork):
			child := str(f, "child_pid", i)
			get(child)
			edge(pid, child)
		case string(event.KindExec):
			p.exe = str(f, "path", i)
			p.execs++
			if pp := str(f, "ppid", i); procs[pp] != nil {
				edge(pp, pid)
			}
		case string(event.KindExit):
			p.exited = true
		}
	}
	nodes := data.NewFrame("nodes", data.NewField("id", nil, []string{}), data.NewField("title", nil, []string{}),
		data.NewField("subtitle", nil, []string{}), data.NewField("detail__execs", nil, []int64{}))
	for _, pid := range order {
		p := procs[pid]
		title := p.exe
		if title == "" {
			title = p.comm
		}
		sub := "pid " + pid
		if !p.exited {
			sub += " (no exit seen)"
		}
		nodes.AppendRow(pid, title, sub, int64(p.execs))
	}
	es := data.NewFrame("edges", data.NewField("id", nil, []string{}), data.NewField("source", nil, []string{}), data.NewField("target", nil, []string{}))
	for _, e := range edgeOrder {
		es.AppendRow(e[0]+"-"+e[1], e[0], e[1])
	}
	nodes.Meta = f.Meta
	nodes.Meta.PreferredVisualization = data.VisTypeNodeGraph
	es.Meta = &data.FrameMeta{PreferredVisualization: data.VisTypeNodeGraph}
	return data.Frames{nodes, es}
}
