package query

import (
	"strings"
)

// CallStartRaws reads the raw call starts (as the journal holds them) of the calls f selects,
// oldest first.
func (t Tables) CallStartRaws(f Filter) (Query, error) { return t.raws(tableStarts, f) }

// CallRecordRaws reads the raw records of the finished calls f selects, oldest first.
func (t Tables) CallRecordRaws(f Filter) (Query, error) { return t.raws(tableCalls, f) }

func (t Tables) raws(table string, f Filter) (Query, error) {
	name, err := t.table(table)
	if err != nil {
		return Query{}, err
	}
	w, err := t.filter(table, f)
	if err != nil {
		return Query{}, err
	}
	return Query{"SELECT raw FROM " + name + " WHERE " + w.String() + " ORDER BY " + t.startOrder(), w.args}, nil
}

// CallStartsByID reads the raw starts of the calls an id names: a call key, a caller's id,
// or TENANT/ID.
func (t Tables) CallStartsByID(id string) (Query, error) {
	name, err := t.table(tableStarts)
	if err != nil {
		return Query{}, err
	}
	cond, args := "call_key = ? OR call_id = ?", []any{id, id}
	if tenant, callID, ok := strings.Cut(id, "/"); ok {
		cond += " OR (tenant = ? AND call_id = ?)"
		args = append(args, tenant, callID)
	}
	return Query{"SELECT raw FROM " + name + " WHERE " + cond + " ORDER BY " + t.startOrder(), args}, nil
}

// CallRecordsOf reads the raw records of a tenant's calls of one id (the caller picks the
// one whose key it wants).
func (t Tables) CallRecordsOf(tenant, callID string) (Query, error) {
	name, err := t.table(tableCalls)
	if err != nil {
		return Query{}, err
	}
	return Query{"SELECT raw FROM " + name + " WHERE tenant = ? AND call_id = ? ORDER BY " + t.startOrder(), []any{tenant, callID}}, nil
}

// Events reads one call's events in order: the time (legacy: seconds, nanoseconds), the kind,
// the columns named (the schema's own, collector's eventReadColumns), then detail. Events
// may carry their call's tenant and tool or leave them empty; either way the primary key
// (tenant, tool, call_id, ...) narrows the read.
func (t Tables) Events(columns []string, tenant, tool, callID, callKey string) (Query, error) {
	name, err := t.table("events")
	if err != nil {
		return Query{}, err
	}
	for _, c := range columns {
		if !identifier.MatchString(c) {
			return Query{}, errNotColumn(c)
		}
	}
	timeCols := "time"
	if t.Dialect == Legacy {
		timeCols = "toUInt32(time), time_ns"
	}
	cols := append([]string{timeCols, "kind"}, columns...)
	return Query{
		"SELECT " + strings.Join(append(cols, "detail"), ", ") + " FROM " + name +
			" WHERE tenant IN (?, '') AND tool IN (?, '') AND call_id = ? AND call_key = ? ORDER BY seq",
		[]any{tenant, tool, callID, callKey},
	}, nil
}

type errNotColumn string

func (e errNotColumn) Error() string { return "column name " + string(e) + " is not an identifier" }
