package audit

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/journal"
)

func ev(key, tenant string, seq uint64, kind event.Kind, at time.Time) event.Event {
	return event.Event{CallID: "id-" + key, CallKey: key, Tenant: tenant, Tool: "sh", Seq: seq, Kind: kind, Time: at}
}

func TestEventFilterMatchesWhatEachFieldNames(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	e := ev("k1", "acme", 3, event.KindOpen, t0)
	setup := e
	setup.Phase = event.PhaseSetup
	for _, tc := range []struct {
		name string
		f    EventFilter
		e    event.Event
		want bool
	}{
		{"an empty filter matches the tool's events", EventFilter{}, e, true},
		{"an empty filter hides berm's set-up", EventFilter{}, setup, false},
		{"--all shows berm's set-up", EventFilter{Setup: true}, setup, true},
		{"the call's key", EventFilter{Call: "k1"}, e, true},
		{"the caller's id", EventFilter{Call: "id-k1"}, e, true},
		{"tenant/id", EventFilter{Call: "acme/id-k1"}, e, true},
		{"another tenant's id", EventFilter{Call: "other/id-k1"}, e, false},
		{"another call", EventFilter{Call: "k2"}, e, false},
		{"the tenant", EventFilter{Tenant: "acme"}, e, true},
		{"another tenant", EventFilter{Tenant: "other"}, e, false},
		{"a listed kind", EventFilter{Kinds: []event.Kind{event.KindExec, event.KindOpen}}, e, true},
		{"an unlisted kind", EventFilter{Kinds: []event.Kind{event.KindExec}}, e, false},
		{"since its instant", EventFilter{Since: t0}, e, true},
		{"since after it", EventFilter{Since: t0.Add(time.Nanosecond)}, e, false},
		{"another tool", EventFilter{Tool: "python"}, e, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.f.Match(&tc.e); got != tc.want {
				t.Fatalf("Match = %v, want %v", got, tc.want)
			}
		})
	}
}

// Following a journal gives what is stored, then each event appended later exactly once, in
// the order written, across a segment the writer is still appending to.
func TestJournalEventsFollowGivesEachEventOnce(t *testing.T) {
	dir := t.TempDir()
	w, err := journal.OpenWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	t0 := time.Unix(1700000000, 0)
	if err := w.AppendEvents([]event.Event{ev("a", "acme", 1, event.KindExec, t0), ev("b", "other", 1, event.KindExec, t0)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan event.Event, 100)
	done := make(chan error, 1)
	go func() {
		done <- Journal{Dir: dir}.Events(ctx, EventFilter{Tenant: "acme"}, true, func(e event.Event) error {
			got <- e
			return nil
		})
	}()
	next := func() event.Event {
		select {
		case e := <-got:
			return e
		case err := <-done:
			t.Fatalf("Events ended while following: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("no event followed in 30 s")
		}
		return event.Event{}
	}
	if e := next(); e.CallKey != "a" || e.Seq != 1 {
		t.Fatalf("first event %s, want a/1", e.ID())
	}
	for seq := uint64(2); seq <= 5; seq++ {
		if err := w.AppendEvents([]event.Event{ev("b", "other", seq, event.KindOpen, t0), ev("a", "acme", seq, event.KindOpen, t0)}); err != nil {
			t.Fatal(err)
		}
		if e := next(); e.CallKey != "a" || e.Seq != seq {
			t.Fatalf("followed %s, want a/%d", e.ID(), seq)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Events after cancel: %v", err)
	}
	select {
	case e := <-got:
		t.Fatalf("an event given twice or from another tenant: %s", e.ID())
	default:
	}
}

// A node filter keeps the events of the calls begun on that node: the journal knows a call's
// node from its CallStart (an event does not carry it).
func TestJournalEventsOfANodeAreTheCallsBegunThere(t *testing.T) {
	dir := t.TempDir()
	w, err := journal.OpenWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	t0 := time.Unix(1700000000, 0)
	for _, c := range []struct{ key, node string }{{"on-a", "node-a"}, {"on-b", "node-b"}} {
		if err := w.AppendCallStart(&event.CallStart{CallID: "id-" + c.key, CallKey: c.key, Tenant: "acme", Tool: "sh", Node: c.node, Start: t0}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.AppendEvents([]event.Event{ev("on-a", "acme", 1, event.KindExec, t0), ev("on-b", "acme", 1, event.KindExec, t0), ev("unbegun", "acme", 1, event.KindExec, t0)}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		node string
		want []string
	}{
		{"", []string{"on-a", "on-b", "unbegun"}},
		{"node-a", []string{"on-a"}},
		{"node-b", []string{"on-b"}},
		{"node-c", nil},
	} {
		t.Run("node "+tc.node, func(t *testing.T) {
			var got []string
			err := Journal{Dir: dir}.Events(context.Background(), EventFilter{Node: tc.node}, false, func(e event.Event) error {
				got = append(got, e.CallKey)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("events of calls %v, want %v", got, tc.want)
			}
		})
	}
}
