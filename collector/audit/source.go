// Package audit reads calls and timelines back from a store (the local journal, or ClickHouse
// through the collector) and prints them. Every source gives the same Call and Event values,
// so `berm calls` and `berm timeline` print the same whichever source they read.
package audit

import (
	"time"

	"github.com/bermsec/berm/agent/event"
)

// Call is what a store knows of one call: always its start, and its record once it ended.
type Call struct {
	Start  event.CallStart   `json:"start"`
	Record *event.CallRecord `json:"record"` // nil while running, or when the writer died before the end
}

// Filter selects calls. Zero fields match everything.
type Filter struct {
	Tool   string
	Tenant string
	Since  time.Time
}

func (f Filter) Match(s *event.CallStart) bool {
	return (f.Tool == "" || s.Tool == f.Tool) &&
		(f.Tenant == "" || s.Tenant == f.Tenant) &&
		(f.Since.IsZero() || !s.Start.Before(f.Since))
}

// Source is a store of calls.
type Source interface {
	// Calls returns the matching calls, oldest first.
	Calls(f Filter) ([]Call, error)
	// Timeline returns one call and its events in order (by Seq). ErrNoCall if unknown.
	Timeline(callID string) (*Call, []event.Event, error)
}
