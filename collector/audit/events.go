package audit

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/journal"
)

// EventFilter selects events across calls. Zero fields match everything.
type EventFilter struct {
	Since  time.Time    // events seen at or after this instant
	Call   string       // a call key, a caller's call id, or TENANT/ID
	Tenant string       // only this tenant's calls
	Tool   string       // only this tool's calls
	Node   string       // only the calls of this node (their CallStart's node)
	Kinds  []event.Kind // only these kinds
	// Setup keeps the events of berm's own sandbox set-up (phase setup), which the CLI hides
	// by default as `berm timeline` does.
	Setup bool
}

// Match says whether e passes the filter. An event does not carry its node: a source checks
// Node against the call's start (MatchNode).

func (f EventFilter) Match(e *event.Event) bool {
	return (f.Since.IsZero() || !e.Time.Before(f.Since)) &&
		(f.Call == "" || e.CallKey == f.Call || e.CallID == f.Call || e.Tenant+"/"+e.CallID == f.Call) &&
		(f.Tenant == "" || e.Tenant == f.Tenant) &&
		(f.Tool == "" || e.Tool == f.Tool) &&
		(len(f.Kinds) == 0 || slices.Contains(f.Kinds, e.Kind)) &&
		(f.Setup || e.Phase != event.PhaseSetup)
}

// EventSource is a store that can stream events across calls.
type EventSource interface {
	// Events calls fn for every matching event, in the order the store holds them (the
	// journal's: the order its writer appended them, each call's in Seq order). With follow it
	// then waits for new ones until ctx ends (a nil error then); without, it returns at the end.
	Events(ctx context.Context, f EventFilter, follow bool, fn func(event.Event) error) error
}

// followPoll is how often a followed journal is read again for what was appended.
const followPoll = 200 * time.Millisecond

// Events streams the journal's events. Following, it reads from where the last scan ended, so
// an event is given once however long it runs; a record the writer has not finished yet is
// read on a later scan, once whole.
func (j Journal) Events(ctx context.Context, f EventFilter, follow bool, fn func(event.Event) error) error {
	pos := journal.Position{}
	// the node of each call seen begun, when the filter names one (a journal is one node's, but
	// a node renamed keeps its older calls under the old name)
	var nodes map[string]string
	if f.Node != "" {
		nodes = map[string]string{}
	}
	for {
		res, err := journal.Scan(j.Dir, pos, func(r journal.Record) error {
			if r.Type == journal.TypeCallStart && nodes != nil {
				s, err := journal.DecodeCallStart(r.Payload)
				if err != nil {
					return nil // the calls' reader reports it; its events are not this node's
				}
				nodes[s.Key()] = s.Node
				return nil
			}
			if r.Type != journal.TypeEvents {
				return nil
			}
			batch, err := journal.DecodeEvents(r.Payload)
			if err != nil {
				return fmt.Errorf("record at %s: %w", r.Pos, err)
			}
			for i := range batch {
				if f.Match(&batch[i]) && (nodes == nil || f.MatchNode(nodes[batch[i].Key()])) {
					if err := fn(batch[i]); err != nil {
						return err
					}
				}
			}
			return nil
		})
		for _, p := range res.Problems {
			// A torn tail of the newest segment is read again once whole: only what is
			// skipped for good is reported.
			if p.Pos.Segment != res.End.Segment || !follow {
				j.log().Warn("journal record skipped", "segment", p.Pos.Segment, "offset", p.Pos.Offset, "reason", p.Reason)
			}
		}
		if err != nil || !follow {
			return err
		}
		pos = res.End
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(followPoll):
		}
	}
}

var _ EventSource = Journal{}

// MatchNode says whether a call begun on node passes the filter's Node.
func (f EventFilter) MatchNode(node string) bool { return f.Node == "" || node == f.Node }
