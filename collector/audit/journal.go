package audit

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/journal"
)

// ErrNoCall is returned for a call id the store does not know.
var ErrNoCall = errors.New("no such call")

// ErrAmbiguous is returned for a caller's call id that names several calls (another tenant's,
// or an id reused): name the call by its call key (or add the tenant) instead.
var ErrAmbiguous = errors.New("several calls have this id")

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
			if _, dup := calls[s.Key()]; !dup {
				order = append(order, s.Key())
			}
			calls[s.Key()] = &Call{Start: *s}
		case journal.TypeCallEnd:
			rec, err := journal.DecodeCallEnd(r.Payload)
			if err != nil {
				return fmt.Errorf("record at %s: %w", r.Pos, err)
			}
			if c, ok := calls[rec.Key()]; ok {
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

// Timeline is one call's record and events. id is the call's key, or the id its caller gave
// it when that names one call only.
func (j Journal) Timeline(id string) (*Call, []event.Event, error) {
	key, err := j.resolve(id)
	if err != nil {
		return nil, nil, err
	}
	var call *Call
	var evs []event.Event
	err = j.scan(func(r journal.Record) error {
		switch r.Type {
		case journal.TypeCallStart:
			s, err := journal.DecodeCallStart(r.Payload)
			if err != nil {
				return fmt.Errorf("record at %s: %w", r.Pos, err)
			}
			if s.Key() == key {
				call = &Call{Start: *s}
			}
		case journal.TypeEvents:
			batch, err := journal.DecodeEvents(r.Payload)
			if err != nil {
				return fmt.Errorf("record at %s: %w", r.Pos, err)
			}
			for _, e := range batch {
				if e.Key() == key {
					evs = append(evs, e)
				}
			}
		case journal.TypeCallEnd:
			rec, err := journal.DecodeCallEnd(r.Payload)
			if err != nil {
				return fmt.Errorf("record at %s: %w", r.Pos, err)
			}
			if rec.Key() == key && call != nil {
				call.Record = rec
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if call == nil {
		return nil, nil, fmt.Errorf("call %q: %w", id, ErrNoCall)
	}
	sort.SliceStable(evs, func(a, b int) bool { return evs[a].Seq < evs[b].Seq })
	return call, evs, nil
}

// resolve finds the key of the one call id names: a call key, or a caller's id (optionally
// TENANT/ID) that only one call has.
func (j Journal) resolve(id string) (string, error) {
	var keys []string
	err := j.scan(func(r journal.Record) error {
		if r.Type != journal.TypeCallStart {
			return nil
		}
		s, err := journal.DecodeCallStart(r.Payload)
		if err != nil {
			return fmt.Errorf("record at %s: %w", r.Pos, err)
		}
		if s.CallKey == id || s.CallID == id || s.Tenant+"/"+s.CallID == id {
			keys = append(keys, s.Key())
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	switch len(keys) {
	case 0:
		return "", fmt.Errorf("call %q: %w", id, ErrNoCall)
	case 1:
		return keys[0], nil
	}
	return "", fmt.Errorf("call %q: %w (call keys %s): name one by its key or as TENANT/ID", id, ErrAmbiguous, strings.Join(keys, ", "))
}
