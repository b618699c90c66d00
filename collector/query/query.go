// Package query holds the SQL that reads berm's ClickHouse tables: one source for both
// dialects (legacy, for servers such as Debian's 18.16, and modern), shared by berm's CLI
// (collector.CHSource: berm calls, timeline and matrix --source clickhouse://) and the Grafana
// datasource. Every query is built from a Filter and returned as SQL with positional
// arguments (?): a value a user typed only ever travels as an argument, which clickhouse-go
// quotes when it binds them, never as text spliced into the SQL. 18.16 has no server-side
// parameters, so the binding is the client's; the SQL itself names only fixed columns and the
// database, which must be an identifier.
package query

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Dialect is the flavour of the server's tables (collector.Dialect has the same values).
type Dialect string

const (
	Legacy Dialect = "legacy" // DateTime seconds plus a nanoseconds column (start_ns)
	Modern Dialect = "modern" // DateTime64(9)
)

// Query is a statement and its positional arguments, for conn.Query(ctx, q.SQL, q.Args...).
type Query struct {
	SQL  string
	Args []any
}

// Tables names berm's tables in one database of a server of one dialect.
type Tables struct {
	Database string
	Dialect  Dialect
}

var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (t Tables) table(name string) (string, error) {
	if !identifier.MatchString(t.Database) {
		return "", fmt.Errorf("database name %q is not an identifier", t.Database)
	}
	if t.Dialect != Legacy && t.Dialect != Modern {
		return "", fmt.Errorf("unknown dialect %q", t.Dialect)
	}
	return t.Database + "." + name, nil
}

// Filter selects calls. Zero values select everything.
type Filter struct {
	Since, Until time.Time // calls that started in [Since, Until)
	Tenant       string
	Tools        []string // any of them
	Host         string   // the node the call ran on
	// Tenants and Hosts: any of them (a Grafana variable with several values, or All's list);
	// with Tenant or Host set, both must hold.
	Tenants, Hosts []string
	// Surface with State: calls whose record had that surface in that state (State* names, or
	// "violated": violations attributed to it). Surface alone: calls with violations there.
	// The matrix shows only the surface (State is not a matrix filter).
	Surface, State string
	EndReason      string
	Complete       *bool  // nil: either
	Text           string // free text, case-insensitive, in the call's id, key, tool, tenant, host, policy, argv (and end detail)
}

// callsOnly names the filters only finished calls (the calls table) can answer.
func (f Filter) callsOnly() []string {
	var out []string
	if f.Surface != "" || f.State != "" {
		out = append(out, "surface")
	}
	if f.EndReason != "" {
		out = append(out, "end reason")
	}
	if f.Complete != nil {
		out = append(out, "complete")
	}
	return out
}

// where is a conjunction of conditions and their arguments, in order.
type where struct {
	conds []string
	args  []any
}

func (w *where) add(cond string, args ...any) {
	w.conds = append(w.conds, cond)
	w.args = append(w.args, args...)
}

func (w *where) String() string {
	if len(w.conds) == 0 {
		return "1"
	}
	return strings.Join(w.conds, " AND ")
}

// calls tables: call_starts (begun calls) or calls (finished ones).
const (
	tableStarts = "call_starts"
	tableCalls  = "calls"
)

// filter renders f's conditions on a table of calls.
func (t Tables) filter(table string, f Filter) (*where, error) {
	w := &where{}
	if table == tableStarts {
		if c := f.callsOnly(); len(c) > 0 {
			return nil, fmt.Errorf("%s: filters on finished calls only", strings.Join(c, ", "))
		}
	}
	if !f.Since.IsZero() {
		t.timeBound(w, ">", f.Since)
	}
	if !f.Until.IsZero() {
		t.timeBound(w, "<", f.Until)
	}
	if f.Tenant != "" {
		w.add("tenant = ?", f.Tenant)
	}
	if len(f.Tools) > 0 {
		w.add("has(?, tool)", f.Tools)
	}
	if len(f.Tenants) > 0 {
		w.add("has(?, tenant)", f.Tenants)
	}
	if f.Host != "" {
		w.add("node = ?", f.Host)
	}
	if len(f.Hosts) > 0 {
		w.add("has(?, node)", f.Hosts)
	}
	if f.EndReason != "" {
		w.add("end_reason = ?", f.EndReason)
	}
	if f.Complete != nil {
		w.add("complete = ?", boolArg(*f.Complete))
	}
	switch {
	case f.State == "violated" || f.Surface != "" && f.State == "":
		if f.Surface == "" {
			w.add("arraySum(surface_violations) > 0")
		} else {
			w.add("arrayExists((s, v) -> s = ? AND v > 0, surfaces, surface_violations)", f.Surface)
		}
	case f.State != "":
		if f.Surface == "" {
			w.add("has(surface_states, ?)", f.State)
		} else {
			w.add("arrayExists((s, st) -> s = ? AND st = ?, surfaces, surface_states)", f.Surface, f.State)
		}
	}
	if f.Text != "" {
		hay := "concat(call_id, '\\n', call_key, '\\n', tool, '\\n', tenant, '\\n', node, '\\n', policy, '\\n', arrayStringConcat(argv, ' ')"
		if table == tableCalls {
			hay += ", '\\n', end_detail"
		}
		w.add("positionCaseInsensitive("+hay+"), ?) > 0", f.Text)
	}
	return w, nil
}

func boolArg(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// timeBound adds start_time op at (op ">" for since, inclusive; "<" for until, exclusive),
// exact to the nanosecond in both dialects.
func (t Tables) timeBound(w *where, op string, at time.Time) {
	at = at.UTC()
	if t.Dialect == Modern {
		cmp := ">="
		if op == "<" {
			cmp = "<"
		}
		w.add("start_time "+cmp+" toDateTime64(?, 9, 'UTC')", at.Format("2006-01-02 15:04:05.000000000"))
		return
	}
	// Legacy: whole seconds in start_time, the rest in start_ns.
	nsCmp := ">="
	if op == "<" {
		nsCmp = "<"
	}
	w.add("(start_time "+op+" toDateTime(?) OR start_time = toDateTime(?) AND start_ns "+nsCmp+" ?)",
		at.Unix(), at.Unix(), uint32(at.Nanosecond()))
}

// startOrder orders call rows by their start, to the nanosecond.
func (t Tables) startOrder() string {
	if t.Dialect == Legacy {
		return "start_time, start_ns"
	}
	return "start_time"
}

// dedup keeps one row of a call where the table may hold it twice until ClickHouse merges
// (ReplacingMergeTree's key): what a query reads is what the merged table will hold.
const dedup = "LIMIT 1 BY tenant, tool, start_time, call_id"
