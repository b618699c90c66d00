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
	d := &decoded{typ: r.Type, raw: string(r.Payload)}
	d.decode()
	if d.err != nil {
		return time.Time{}, d.err
	}
	return b.addDecoded(d), nil
}

// decoded is a journal record turned into rows: the costly part of shipping, done by several
// goroutines at once (see decodeAll). raw is the payload as a string, which the rows' strings
// are slices of. A collector reuses its decoded records, run after run, with their rows'
// memory: rows are copied into a batch's columns, and were the collector's largest garbage.
// (Until reused, rows keep their record's text alive: a run's worth at most.)
type decoded struct {
	typ    journal.RecordType
	pos    journal.Position
	next   journal.Position
	raw    string
	start  *event.CallStart
	record *event.CallRecord
	events []eventRow
	err    error
}

func (d *decoded) decode() {
	d.start, d.record, d.err = nil, nil, nil
	switch d.typ {
	case journal.TypeCallStart:
		d.start, d.err = journal.DecodeCallStart([]byte(d.raw))
	case journal.TypeCallEnd:
		d.record, d.err = journal.DecodeCallEnd([]byte(d.raw))
	case journal.TypeEvents:
		var ok bool
		if d.events, ok = scanEvents(d.raw, d.events[:0]); !ok {
			d.events, d.err = decodeEvents(d.raw)
		}
	default:
		d.err = fmt.Errorf("unknown record type %s", d.typ)
	}
}

// decodeEvents is the general way to turn an events record into rows, for records that
// scanEvents does not take (not in the form the journal's writer gives them): decode, then
// encode each event's parts for the detail column. The journal's decoder (encoding/json) costs
// five times as much as goccy/go-json, which decodes the same JSON into the same values.
func decodeEvents(payload string) ([]eventRow, error) {
	var evs []event.Event
	if err := gojson.Unmarshal([]byte(payload), &evs); err != nil {
		return nil, fmt.Errorf("decode events: %w", err)
	}
	rows := make([]eventRow, len(evs))
	for i := range evs {
		detail, err := gojson.Marshal(partsOf(&evs[i]))
		if err != nil {
			return nil, fmt.Errorf("encode event %s: %w", evs[i].ID(), err)
		}
		rows[i] = rowOf(&evs[i], string(detail))
	}
	return rows, nil
}

// appendDecoded adds a record to a run to decode, reusing the decoded record that held its
// place in an earlier run.
func appendDecoded(run []*decoded, r journal.Record) []*decoded {
	n := len(run)
	if n < cap(run) && run[:n+1][n] != nil {
		run = run[:n+1]
	} else {
		run = append(run, &decoded{})
	}
	d := run[n]
	*d = decoded{typ: r.Type, pos: r.Pos, next: r.Next, raw: string(r.Payload), events: d.events[:0]}
	return run
}

// decodeAll decodes records on n goroutines.
func decodeAll(recs []*decoded, n int) {
	if len(recs) < 2 || n < 2 {
		for _, d := range recs {
			d.decode()
		}
		return
	}
	var wg sync.WaitGroup
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < len(recs); i += n {
				recs[i].decode()
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
		b.events.add(e)
		if e.alert != nil {
			b.alerts.add(e)
		}
		if first.IsZero() || e.time.Before(first) {
			first = e.time
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
