package query

import (
	"fmt"
	"strings"
	"time"
)

// Params are what a Grafana panel asks for (the datasource's query types, Build). Their SQL
// quotes each value into the text (Quote) rather than binding it, because a query type is
// several statements whose rows the plugin folds; the matrix is Tables.Matrix's. Lists are ORed; an empty list does not filter.
type Params struct {
	Database string
	Dialect  Dialect
	From, To time.Time
	// Bucket is the width of a time series' step, whole seconds (at least 1).
	Bucket time.Duration

	Tenants   []string
	Tools     []string
	Hosts     []string
	Surface   string
	EndReason string
	Complete  string // "", "true" or "false"
	Text      string // free text: call id, argv, end detail, or a path, address or syscall of an event
	Call      string // a call's key (or its id)
	GroupBy   string // what a series is split by, where a query type offers a choice
	Field     string // which values a "values" query lists
	Limit     int
}

// Check refuses what would make a query wrong rather than empty.
func (p *Params) Check() error {
	if !identifier.MatchString(p.Database) {
		return fmt.Errorf("database %q is not a plain identifier", p.Database)
	}
	if p.Dialect != Legacy && p.Dialect != Modern {
		return fmt.Errorf("dialect %q: want %s or %s", p.Dialect, Legacy, Modern)
	}
	if p.From.IsZero() || p.To.IsZero() || p.To.Before(p.From) {
		return fmt.Errorf("time range %v..%v is empty", p.From, p.To)
	}
	if p.Bucket < time.Second {
		p.Bucket = time.Second
	}
	if p.Limit <= 0 || p.Limit > 10000 {
		p.Limit = 1000
	}
	switch p.Complete {
	case "", "true", "false":
	default:
		return fmt.Errorf("complete %q: want true, false or empty", p.Complete)
	}
	return nil
}

func (p *Params) t(name string) string { return p.Database + "." + name }

// Quote makes a ClickHouse string literal: backslash and quote escaped, nothing else can end
// it (18.16 has no server-side parameters, so every value goes through here).
func Quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `'`, `\'`)
	return "'" + r.Replace(s) + "'"
}

func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = Quote(s)
	}
	return strings.Join(q, ", ")
}

// in is "col IN (...)", or "" when the list is empty.
func in(col string, vals []string) string {
	if len(vals) == 0 {
		return ""
	}
	return col + " IN (" + quoteList(vals) + ")"
}

func and(conds ...string) string {
	var keep []string
	for _, c := range conds {
		if c != "" {
			keep = append(keep, "("+c+")")
		}
	}
	if len(keep) == 0 {
		return "1"
	}
	return strings.Join(keep, " AND ")
}

// between selects the range on a time column; DateTime has whole seconds, so the bounds are
// widened to them.
func (p *Params) between(col string) string {
	return fmt.Sprintf("%s >= toDateTime(%d) AND %s <= toDateTime(%d)", col, p.From.Unix(), col, p.To.Unix())
}

// bucket is the start of the step a time falls in. 18.16 has no toStartOfInterval.
func (p *Params) bucket(col string) string {
	n := int64(p.Bucket / time.Second)
	if p.Dialect == Modern {
		col = "toDateTime(" + col + ")"
	}
	return fmt.Sprintf("toDateTime(intDiv(toUInt32(%s), %d) * %d)", col, n, n)
}

// nanos is an event's time in nanoseconds since the epoch.
func (p *Params) nanos(col, nsCol string) string {
	if p.Dialect == Modern {
		return "toUnixTimestamp64Nano(" + col + ")"
	}
	return fmt.Sprintf("toUInt64(%s) * 1000000000 + %s", col, nsCol)
}

// addr is an event's address as text, IPv4 without its IPv6 mapping.
func addr(col string) string {
	return "replaceRegexpOne(IPv6NumToString(" + col + "), '^::ffff:', '')"
}

// scope is the tenant, tool and host filter every query has.
func (p *Params) scope(hostCol string) string {
	c := []string{in("tenant", p.Tenants), in("tool", p.Tools)}
	if hostCol != "" {
		c = append(c, in(hostCol, p.Hosts))
	}
	return and(c...)
}

// callIs selects one call by its key, or by its id (what berm run, the agent's logs and an
// alert give on-call; the tenant variable narrows an id two tenants used).
func (p *Params) callIs() string {
	if p.Call == "" {
		return "0" // a call timeline with no call picked shows nothing, not every call
	}
	return "call_key = " + Quote(p.Call) + " OR call_id = " + Quote(p.Call)
}
