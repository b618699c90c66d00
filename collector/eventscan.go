package collector

import (
	"strings"

	"github.com/bermsec/berm/agent/event"
)

// scanEvents turns an events record into rows in one pass over its JSON, without decoding the
// kind-specific parts into values and encoding them again for the detail column: the parts'
// text is copied as it stands, which is what encoding them again would give back (the
// scanner takes nothing else). Every string column is a substring of the record: no copies.
// The rows are appended to rows (empty, with room to reuse). ok is false when the record is
// not in the writer's form; decodeEvents then decodes it the general way. This is the
// collector's hot path: go-json's decode and re-encode took most of its CPU and garbage.
func scanEvents(s string, rows []eventRow) (_ []eventRow, ok bool) {
	sc := scanner{s: s}
	var (
		e event.Event
		p scanParts
	)
	if rows == nil {
		rows = make([]eventRow, 0, len(s)/256+8) // events of the writer are rarely shorter
	}
	size := 0
	sc.expect('[')
	if sc.peek() == ']' {
		sc.i++
	} else {
		for {
			r := sc.event(&e, &p)
			if r.detail != "" {
				size += len(r.detail) + 1 // the parts with their leading comma, which { replaces, and }
			}
			rows = append(rows, r)
			if sc.peek() != ',' {
				break
			}
			sc.i++
		}
		sc.expect(']')
	}
	if sc.bad || sc.i != len(s) {
		return rows[:0], false
	}
	// One buffer for the record's details: the rows' detail strings are slices of it.
	var b strings.Builder
	b.Grow(size)
	for k := range rows {
		parts := rows[k].detail
		if parts == "" {
			rows[k].detail = "{}"
			continue
		}
		at := b.Len()
		b.WriteByte('{')
		b.WriteString(parts[1:])
		b.WriteByte('}')
		rows[k].detail = b.String()[at:]
	}
	return rows, true
}

// The readers of an event and of its parts are generated from agent/event (scan_gen.go):
// need for members always written, has for omitempty ones (present only when not empty). A
// member that is no column is still read, to check it is what the writer would have written.

// isTrue reads an omitempty bool, which is present only when true.
func (sc *scanner) isTrue() bool {
	sc.check(sc.literal("true"))
	return true
}
