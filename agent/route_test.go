package agent

import (
	"bytes"
	"testing"
)

// A call's queue is bounded in batches and in bytes, and the node's queues together in bytes:
// past any bound, the call's records are dropped and counted against it, never against another
// call, and never waited for.
func TestRouteBoundsAndCountsAgainstTheCall(t *testing.T) {
	big := func(n int) *batch {
		b := &batch{}
		b.add(bytes.Repeat([]byte{1}, n))
		return b
	}
	cases := []struct {
		name       string
		fill       func(a *Agent, c, other *Call) // before the batch under test
		size       int
		wantRouted bool
	}{
		{"room", func(*Agent, *Call, *Call) {}, 1000, true},
		{"inbox full in batches", func(a *Agent, c, _ *Call) {
			for range inboxBatches {
				a.route(c, big(10))
			}
		}, 10, false},
		{"call's bytes full", func(a *Agent, c, _ *Call) {
			for range inboxBytes / (1 << 20) {
				a.route(c, big(1<<20))
			}
		}, 10, false},
		{"node's bytes full, by another call", func(a *Agent, _, other *Call) { a.queued.Store(nodeBytes) }, 10, false},
		{"another call's full inbox is not this call's", func(a *Agent, _, other *Call) {
			for range inboxBatches {
				a.route(other, big(10))
			}
		}, 10, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := &Agent{m: newMetrics(nil, func() float64 { return 0 }, 1)}
			c, other := &Call{slot: 1}, &Call{slot: 2}
			c.worker.init()
			other.worker.init()
			tc.fill(a, c, other)
			routed, dropped := c.routed, a.userDrops[1].Load()
			a.route(c, big(tc.size))
			gotRouted := c.routed == routed+1
			if gotRouted != tc.wantRouted {
				t.Fatalf("routed %v, want %v", gotRouted, tc.wantRouted)
			}
			if !tc.wantRouted && a.userDrops[1].Load() != dropped+1 {
				t.Errorf("a dropped record not counted against its call: %d drops, had %d", a.userDrops[1].Load(), dropped)
			}
			if c.queued.Load() > inboxBytes || a.queued.Load() > nodeBytes {
				t.Errorf("queued %d bytes for the call, %d for the node: past the bounds", c.queued.Load(), a.queued.Load())
			}
		})
	}
}
