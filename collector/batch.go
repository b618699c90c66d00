package collector

import (
	"fmt"
	"reflect"
	"sync"
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
	d := decodeRecord(r.Type, r.Payload)
	if d.err != nil {
		return time.Time{}, d.err
	}
	return b.addDecoded(d), nil
}

// decoded is a journal record decoded and its events' details encoded: the costly part of
// turning records into rows, done by several goroutines at once (see decodeAll).
type decoded struct {
	typ     journal.RecordType
	pos     journal.Position
	next    journal.Position
	raw     []byte
	start   *event.CallStart
	record  *event.CallRecord
	events  []event.Event
	details []string
	err     error
}

func decodeRecord(t journal.RecordType, payload []byte) *decoded {
	d := &decoded{typ: t, raw: payload}
	switch t {
	case journal.TypeCallStart:
		d.start, d.err = journal.DecodeCallStart(payload)
	case journal.TypeCallEnd:
		d.record, d.err = journal.DecodeCallEnd(payload)
	case journal.TypeEvents:
		// The journal's decoder (encoding/json) costs five times as much: the collector would
		// be bound by it. goccy/go-json decodes the same JSON into the same values.
		if err := gojson.Unmarshal(payload, &d.events); err != nil {
			d.err = fmt.Errorf("decode events: %w", err)
			return d
		}
		d.details = make([]string, len(d.events))
		for i := range d.events {
			detail, err := gojson.Marshal(partsOf(&d.events[i]))
			if err != nil {
				d.err = fmt.Errorf("encode event %s: %w", d.events[i].ID(), err)
				return d
			}
			d.details[i] = string(detail)
		}
	default:
		d.err = fmt.Errorf("unknown record type %s", t)
	}
	return d
}

// decodeAll decodes records on n goroutines.
func decodeAll(recs []*decoded, n int) {
	if len(recs) < 2 || n < 2 {
		for _, d := range recs {
			*d = *decodeRecord(d.typ, d.raw)
		}
		return
	}
	var wg sync.WaitGroup
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < len(recs); i += n {
				pos, next := recs[i].pos, recs[i].next
				recs[i] = decodeRecord(recs[i].typ, recs[i].raw)
				recs[i].pos, recs[i].next = pos, next
			}
		}(w)
	}
	wg.Wait()
}

// addDecoded adds a decoded record's rows and returns its oldest time.
func (b *batch) addDecoded(d *decoded) time.Time {
	switch d.typ {
	case journal.TypeCallStart:
		b.starts.add(d.start, d.raw)
		return d.start.Start
	case journal.TypeCallEnd:
		b.calls.add(d.record, d.raw)
		return d.record.End
	}
	var first time.Time
	for i := range d.events {
		e := &d.events[i]
		b.events.add(e, d.details[i])
		if e.Kind == event.KindAlert && e.Alert != nil {
			b.alerts.add(e)
		}
		if first.IsZero() || e.Time.Before(first) {
			first = e.Time
		}
	}
	return first
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
