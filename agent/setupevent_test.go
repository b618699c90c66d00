package agent

import (
	"testing"

	"github.com/bermsec/berm/agent/event"
)

// The call's own events begin at the tool's exec: what the init and the tool's stage do before
// (the stage runs berm-stage, or the init's binary) is berm's set-up, not the tool's.
func TestSetupEvent(t *testing.T) {
	const initPID, stagePID, other = 10, 11, 12
	exec := func(pid, ppid uint32, name string) event.Event {
		return event.Event{PID: pid, PPID: ppid, Kind: event.KindExec, Exec: &event.Exec{ExeName: name}}
	}
	ev := func(pid, ppid uint32, kind event.Kind) event.Event {
		return event.Event{PID: pid, PPID: ppid, Kind: kind}
	}
	type step struct {
		ev    event.Event
		setup bool
	}
	for _, tc := range []struct {
		name     string
		stageExe string
		steps    []step
	}{
		{"C stage", "berm-stage", []step{
			{ev(initPID, 1, event.KindOpen), true},
			{ev(initPID, 1, event.KindFork), true},
			{exec(stagePID, initPID, "berm-stage"), true},
			{ev(stagePID, initPID, event.KindOpen), true},
			{exec(stagePID, initPID, "dash"), false},
			{ev(stagePID, initPID, event.KindOpen), false},
			{ev(other, stagePID, event.KindFork), false},
			// the init stays berm's, its reaped orphans are the tool's
			{ev(initPID, 1, event.KindExit), true},
			{ev(other, initPID, event.KindExit), false},
		}},
		{"the stage is the init's binary", "", []step{
			{exec(stagePID, initPID, "berm-init"), true},
			{exec(stagePID, initPID, "berm-stage"), false},
			{ev(stagePID, initPID, event.KindOpen), false},
		}},
		{"after the tool started, an exec named like the stage is the tool's", "berm-stage", []step{
			{exec(stagePID, initPID, "berm-init"), true},
			{exec(stagePID, initPID, "python3"), false},
			{exec(stagePID, initPID, "berm-stage"), false},
		}},
		{"a process that is not the init's child is the tool's", "berm-stage", []step{
			{exec(other, stagePID, "sh"), false},
			{exec(stagePID, initPID, "berm-stage"), true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Call{initPID: initPID, initExe: "berm-init", stageExe: tc.stageExe}
			for i, s := range tc.steps {
				e := s.ev
				if got := c.setupEvent(&e); got != s.setup {
					t.Errorf("step %d (%s of %d, parent %d): set-up %v, want %v", i, e.Kind, e.PID, e.PPID, got, s.setup)
				}
			}
		})
	}
}
