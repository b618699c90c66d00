package sandboxer

import (
	"sync"
	"time"
)

// Timeline is what one launch spent in each of its phases, in order: a phase's time runs from
// the mark before it to its own (Mark). bermd observes it per phase and per kind of sandbox
// (berm_launch_phase_seconds); a nil Timeline marks nothing.
type Timeline struct {
	mu    sync.Mutex
	last  time.Time
	warm  bool
	spans []Span
}

// Span is one phase of a launch and its time.
type Span struct {
	Phase string
	D     time.Duration
}

// NewTimeline starts a timeline at start (the connection accepted).
func NewTimeline(start time.Time) *Timeline { return &Timeline{last: start} }

// Mark ends phase now: its time is since the last mark.
func (t *Timeline) Mark(phase string) {
	if t == nil {
		return
	}
	now := time.Now()
	t.mu.Lock()
	t.spans = append(t.spans, Span{phase, now.Sub(t.last)})
	t.last = now
	t.mu.Unlock()
}

// setWarm says the launch's sandbox was warm.
func (t *Timeline) setWarm() {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.warm = true
	t.mu.Unlock()
}

// Spans are the phases marked so far, and whether the launch's sandbox was warm.
func (t *Timeline) Spans() ([]Span, bool) {
	if t == nil {
		return nil, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Span(nil), t.spans...), t.warm
}

// marker is Mark as a function, nil for a nil Timeline.
func (t *Timeline) marker() func(string) {
	if t == nil {
		return nil
	}
	return t.Mark
}
