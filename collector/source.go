package collector

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/collector/audit"
	"github.com/bermsec/berm/collector/query"
)

// CHSource reads calls and timelines from ClickHouse: the same Call and Event values as
// audit.Journal gives for the journal that was shipped.
type CHSource struct {
	conn    driver.Conn
	o       SchemaOptions
	timeout time.Duration
}

var _ audit.Source = (*CHSource)(nil)

// OpenSource connects to the ClickHouse a collector ships to (DSN as for the collector).
func OpenSource(ctx context.Context, dsn string) (*CHSource, error) {
	opts, db, err := parseDSN(dsn)
	if err != nil {
		return nil, err
	}
	conn, err := dial(ctx, opts)
	if err != nil {
		return nil, err
	}
	d, known, err := serverDialect(ctx, conn, db)
	if err != nil {
		conn.Close()
		return nil, err
	}
	if !known {
		conn.Close()
		return nil, fmt.Errorf("clickhouse %s: database %s has no berm tables (no schema_migrations): nothing was shipped there", redactDSN(dsn), db)
	}
	return &CHSource{conn: conn, o: SchemaOptions{Database: db, Dialect: d}, timeout: opts.ReadTimeout}, nil
}

// Close closes the connection.
func (s *CHSource) Close() error { return s.conn.Close() }

func (s *CHSource) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.timeout)
}

// Calls returns the matching calls, oldest first.
func (s *CHSource) Calls(f audit.Filter) ([]audit.Call, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	qf := query.Filter{Since: f.Since, Tenant: f.Tenant}
	if f.Tool != "" {
		qf.Tools = []string{f.Tool}
	}
	q, err := s.Tables().CallStartRaws(qf)
	starts, err := s.raws(ctx, "call_starts", q, err)
	if err != nil {
		return nil, err
	}
	q, err = s.Tables().CallRecordRaws(qf)
	ends, err := s.raws(ctx, "calls", q, err)
	if err != nil {
		return nil, err
	}
	records := map[string]*event.CallRecord{}
	for _, raw := range ends {
		r, err := decodeCallRecord(raw)
		if err != nil {
			return nil, err
		}
		records[r.Key()] = r
	}
	var out []audit.Call
	seen := map[string]bool{}
	for _, raw := range starts {
		var st event.CallStart
		if err := json.Unmarshal([]byte(raw), &st); err != nil {
			return nil, fmt.Errorf("decode call start from clickhouse: %w", err)
		}
		if !f.Match(&st) || seen[st.Key()] {
			continue
		}
		seen[st.Key()] = true
		out = append(out, audit.Call{Start: st, Record: records[st.Key()]})
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].Start.Start.Before(out[b].Start.Start) })
	return out, nil
}

func decodeCallRecord(raw string) (*event.CallRecord, error) {
	var r event.CallRecord
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return nil, fmt.Errorf("decode call record from clickhouse: %w", err)
	}
	return &r, nil
}

// Tables are the source's tables for collector/query: its database and the dialect its
// schema was created in.
func (s *CHSource) Tables() query.Tables {
	return query.Tables{Database: s.o.Database, Dialect: query.Dialect(s.o.Dialect)}
}

// Conn is the source's connection, for queries of collector/query it does not run itself
// (a query.Query runs as Conn().Query(ctx, q.SQL, q.Args...)).
func (s *CHSource) Conn() driver.Conn { return s.conn }

// raws reads the raw records of a call table that q selects (a query.Tables query and its
// error).
func (s *CHSource) raws(ctx context.Context, table string, q query.Query, err error) ([]string, error) {
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", table, err)
	}
	rows, err := s.conn.Query(ctx, q.SQL, q.Args...)
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", table, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var raw string
		if err := rows.Scan(&raw); err != nil {
			return nil, fmt.Errorf("read %s: %w", table, err)
		}
		out = append(out, raw)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	return out, nil
}

// Timeline returns one call and its events in order. id is the call's key, or the id its
// caller gave it (optionally TENANT/ID) when that names one call only.
func (s *CHSource) Timeline(id string) (*audit.Call, []event.Event, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	q, err := s.Tables().CallStartsByID(id)
	starts, err := s.raws(ctx, "call_starts", q, err)
	if err != nil {
		return nil, nil, err
	}
	call := &audit.Call{}
	var keys []string
	for _, raw := range starts {
		var st event.CallStart
		if err := json.Unmarshal([]byte(raw), &st); err != nil {
			return nil, nil, fmt.Errorf("decode call start from clickhouse: %w", err)
		}
		if !slices.Contains(keys, st.Key()) {
			keys = append(keys, st.Key())
			call.Start = st
		}
	}
	switch {
	case len(keys) == 0:
		return nil, nil, fmt.Errorf("call %q: %w", id, audit.ErrNoCall)
	case len(keys) > 1:
		return nil, nil, fmt.Errorf("call %q: %w (call keys %s): name one by its key or as TENANT/ID", id, audit.ErrAmbiguous, strings.Join(keys, ", "))
	}
	callID := call.Start.CallID
	q, err = s.Tables().CallRecordsOf(call.Start.Tenant, callID)
	ends, err := s.raws(ctx, "calls", q, err)
	if err != nil {
		return nil, nil, err
	}
	for _, raw := range ends {
		r, err := decodeCallRecord(raw)
		if err != nil {
			return nil, nil, err
		}
		if r.Key() == call.Start.Key() {
			call.Record = r
		}
	}
	evs, err := s.events(ctx, call.Start.Tenant, call.Start.Tool, callID, call.Start.CallKey)
	if err != nil {
		return nil, nil, err
	}
	return call, evs, nil
}

func (s *CHSource) events(ctx context.Context, tenant, tool, callID, callKey string) ([]event.Event, error) {
	q, err := s.Tables().Events(eventReadColumns, tenant, tool, callID, callKey)
	if err != nil {
		return nil, fmt.Errorf("query events: %w", err)
	}
	rows, err := s.conn.Query(ctx, q.SQL, q.Args...)
	if err != nil {
		return nil, fmt.Errorf("query events: %w", err)
	}
	defer rows.Close()
	var out []event.Event
	for rows.Next() {
		e := event.Event{CallID: callID}
		var (
			kind, detail string
			t            time.Time
			sec, ns      uint32
			err          error
		)
		common := append(append([]any{&kind}, eventReadTargets(&e)...), &detail)
		if s.o.Dialect == Legacy {
			err = rows.Scan(append([]any{&sec, &ns}, common...)...)
			t = time.Unix(int64(sec), int64(ns))
		} else {
			err = rows.Scan(append([]any{&t}, common...)...)
		}
		if err != nil {
			return nil, fmt.Errorf("read events: %w", err)
		}
		e.Kind = event.Kind(kind)
		e.Time = asDecoded(t)
		var p parts
		if err := json.Unmarshal([]byte(detail), &p); err != nil {
			return nil, fmt.Errorf("decode event %s detail: %w", e.ID(), err)
		}
		p.setOn(&e)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	return out, nil
}

// asDecoded gives a stored instant the location that decoding the journal's JSON on this
// host gives it: UTC for a zero offset, Local otherwise.
func asDecoded(t time.Time) time.Time {
	if _, off := t.In(time.Local).Zone(); off == 0 {
		return t.UTC()
	}
	return t.In(time.Local)
}

var _ audit.EventSource = (*CHSource)(nil)

// Events streams the stored events of the matching calls, call by call (each in Seq order).
// ClickHouse is read once: following new events is the journal's (berm events --follow on
// the node).
func (s *CHSource) Events(_ context.Context, f audit.EventFilter, follow bool, fn func(event.Event) error) error {
	if follow {
		return fmt.Errorf("--follow reads a node's journal: ClickHouse is read once (run berm events --follow on the node)")
	}
	calls, err := s.Calls(audit.Filter{Tool: f.Tool, Tenant: f.Tenant})
	if err != nil {
		return err
	}
	for _, c := range calls {
		st := c.Start
		if f.Call != "" && f.Call != st.Key() && f.Call != st.CallID && f.Call != st.Tenant+"/"+st.CallID {
			continue
		}
		if !f.MatchNode(st.Node) {
			continue
		}
		ctx, cancel := s.ctx()
		evs, err := s.events(ctx, st.Tenant, st.Tool, st.CallID, st.CallKey)
		cancel()
		if err != nil {
			return err
		}
		for i := range evs {
			e := &evs[i]
			e.CallKey, e.Tenant, e.Tool = st.CallKey, st.Tenant, st.Tool
			if f.Match(e) {
				if err := fn(*e); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
