package collector

import (
	"fmt"
	"reflect"
	"time"

	gojson "github.com/goccy/go-json"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/journal"
)

// batch is a run of journal records turned into rows, shipped as one unit: the cursor moves
// to end only once ClickHouse has acknowledged all of its rows.
type batch struct {
	start, end journal.Position
	first      time.Time // oldest record time, for the unshipped-age metric (guarded by metrics.mu)
	noted      bool

	starts startRows
	calls  callRows
	events eventRows
	alerts alertRows
}

// reset readies a batch for reuse from start, keeping its event columns' memory.
func (b *batch) reset(start journal.Position, rows int) {
	events := b.events
	*b = batch{start: start, end: start}
	b.events = events
	b.events.reset(rows + rows/8)
}

func (b *batch) rows() int {
	return b.starts.len() + b.calls.len() + b.events.len() + b.alerts.len()
}

// add turns one journal record into rows.
func (b *batch) add(r journal.Record) (time.Time, error) {
	switch r.Type {
	case journal.TypeCallStart:
		s, err := journal.DecodeCallStart(r.Payload)
		if err != nil {
			return time.Time{}, err
		}
		b.starts.add(s, r.Payload)
		return s.Start, nil
	case journal.TypeCallEnd:
		c, err := journal.DecodeCallEnd(r.Payload)
		if err != nil {
			return time.Time{}, err
		}
		b.calls.add(c, r.Payload)
		return c.End, nil
	case journal.TypeEvents:
		// The journal's decoder (encoding/json) costs five times as much: the collector would
		// be bound by it. goccy/go-json decodes the same JSON into the same values.
		var evs []event.Event
		if err := gojson.Unmarshal(r.Payload, &evs); err != nil {
			return time.Time{}, fmt.Errorf("decode events: %w", err)
		}
		var first time.Time
		for i := range evs {
			e := &evs[i]
			if err := b.events.add(e); err != nil {
				return time.Time{}, err
			}
			if e.Kind == event.KindAlert && e.Alert != nil {
				b.alerts.add(e)
			}
			if first.IsZero() || e.Time.Before(first) {
				first = e.Time
			}
		}
		return first, nil
	}
	return time.Time{}, fmt.Errorf("unknown record type %s", r.Type)
}

// filterColumns keeps the rows whose keep flag is set, in every column.
func filterColumns(cols []column, keep []bool) []column {
	out := make([]column, len(cols))
	for i, c := range cols {
		v := reflect.ValueOf(c.values)
		kept := reflect.MakeSlice(v.Type(), 0, v.Len())
		for j := 0; j < v.Len(); j++ {
			if keep[j] {
				kept = reflect.Append(kept, v.Index(j))
			}
		}
		out[i] = column{c.name, kept.Interface()}
	}
	return out
}
