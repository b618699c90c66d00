package query

import "strings"

// bound is a condition with its values as positional arguments: the approval and DNS query
// types bind every value a panel sends (tenant, tool, call) instead of quoting it into the
// text; only numbers of the time range are written into the SQL.
type bound struct {
	conds []string
	args  []any
}

func (b *bound) add(cond string, args ...any) *bound {
	b.conds = append(b.conds, cond)
	b.args = append(b.args, args...)
	return b
}

func (b *bound) String() string {
	if len(b.conds) == 0 {
		return "1"
	}
	return "(" + strings.Join(b.conds, ") AND (") + ")"
}

// eventsOf selects the events of one kind in the range, of the tenants and tools asked for,
// and of the call when one is asked for.
func (p *Params) eventsOf(kind string) *bound {
	b := &bound{}
	b.add(p.between("time")).add("kind = ?", kind)
	if len(p.Tenants) > 0 {
		b.add("has(?, tenant)", p.Tenants)
	}
	if len(p.Tools) > 0 {
		b.add("has(?, tool)", p.Tools)
	}
	if p.Call != "" {
		b.add("call_key = ? OR call_id = ?", p.Call, p.Call)
	}
	return b
}
