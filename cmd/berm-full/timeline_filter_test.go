package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/bermsec/berm/agent/event"
)

// berm timeline --kind and --pid keep the events asked for; an unknown kind or a pid that is
// not one is a usage error naming what is accepted.
func TestTimelineFilterKeepsTheEventsAskedFor(t *testing.T) {
	evs := []event.Event{
		{Seq: 1, Kind: event.KindExec, PID: 10},
		{Seq: 2, Kind: event.KindOpen, PID: 10},
		{Seq: 3, Kind: event.KindDenial, PID: 11},
		{Seq: 4, Kind: event.KindAlert, PID: 10},
	}
	for _, c := range []struct {
		name, kinds, pid string
		want             []uint64
		err              string
	}{
		{"nothing asked: everything", "", "", []uint64{1, 2, 3, 4}, ""},
		{"one kind", "denial", "", []uint64{3}, ""},
		{"two kinds", "exec, alert", "", []uint64{1, 4}, ""},
		{"a process", "", "10", []uint64{1, 2, 4}, ""},
		{"a kind of a process", "denial", "10", nil, ""},
		{"an unknown kind", "opne", "", nil, `--kind: unknown kind "opne" (kinds: exec, fork`},
		{"a pid that is not one", "", "-3", nil, `--pid: expected a process id, got "-3"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := parseTimelineFilter(c.kinds, c.pid)
			if c.err != "" {
				if err == nil || !strings.HasPrefix(err.Error(), c.err) {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []uint64
			for i := range evs {
				if f.keep(&evs[i]) {
					got = append(got, evs[i].Seq)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("kept %v, want %v", got, c.want)
			}
		})
	}
}
