package audit

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/journal"
)

// ErrNoCall is returned for a call id the store does not know.
var ErrNoCall = errors.New("no such call")

// Journal reads the local journal.
type Journal struct {
	Dir string
	Log *slog.Logger // where skipped torn tails are reported; nil: slog.Default()
}

func (j Journal) log() *slog.Logger {
	if j.Log != nil {
		return j.Log
	}
	return slog.Default()
}

func (j Journal) scan(fn func(journal.Record) error) error {
	res, err := journal.Scan(j.Dir, journal.Position{}, fn)
	for _, p := range res.Problems {
		j.log().Warn("journal record skipped", "segment", p.Pos.Segment, "offset", p.Pos.Offset, "reason", p.Reason)
	}
	return err
}

func (j Journal) Calls(f Filter) ([]Call, error) {
	var order []string
	calls := map[string]*Call{}
	err := j.scan(func(r journal.Record) error {
		switch r.Type {
		case journal.TypeCallStart:
			s, err := journal.DecodeCallStart(r.Payload)
			if err != nil {
				return fmt.Errorf("record at %s: %w", r.Pos, err)
			}
			if !f.Match(s) {
				return nil
			}
			if _, dup := calls[s.CallID]; !dup {
				order = append(order, s.CallID)
			}
			calls[s.CallID] = &Call{Start: *s}
		case journal.TypeCallEnd:
			rec, err := journal.DecodeCallEnd(r.Payload)
			if err != nil {
				return fmt.Errorf("record at %s: %w", r.Pos, err)
			}
			if c, ok := calls[rec.CallID]; ok {
				c.Record = rec
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]Call, 0, len(order))
	for _, id := range order {
		out = append(out, *calls[id])
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].Start.Start.Before(out[b].Start.Start) })
	return out, nil
}

func (j Journal) Timeline(callID string) (*Call, []event.Event, error) {
	var call *Call
	var evs []event.Event
	err := j.scan(func(r journal.Record) error {
		switch r.Type {
		case journal.TypeCallStart:
			s, err := journal.DecodeCallStart(r.Payload)
			if err != nil {
				return fmt.Errorf("record at %s: %w", r.Pos, err)
			}
			if s.CallID == callID {
				call = &Call{Start: *s}
			}
		case journal.TypeEvents:
			batch, err := journal.DecodeEvents(r.Payload)
			if err != nil {
				return fmt.Errorf("record at %s: %w", r.Pos, err)
			}
			for _, e := range batch {
				if e.CallID == callID {
					evs = append(evs, e)
				}
			}
		case journal.TypeCallEnd:
			rec, err := journal.DecodeCallEnd(r.Payload)
			if err != nil {
				return fmt.Errorf("record at %s: %w", r.Pos, err)
			}
			if rec.CallID == callID && call != nil {
				call.Record = rec
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if call == nil {
		return nil, nil, fmt.Errorf("call %q: %w", callID, ErrNoCall)
	}
	sort.SliceStable(evs, func(a, b int) bool { return evs[a].Seq < evs[b].Seq })
	return call, evs, nil
}
