package tetragon

import (
	"testing"
	"time"

	"github.com/cilium/tetragon/api/v1/tetragon"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/bermsec/berm/agent/event"
)

// roundTrip writes r as berm events --format tetragon does and reads it back into Tetragon's
// own type, unknown fields refused.
func roundTrip(t *testing.T, r *tetragon.GetEventsResponse) *tetragon.GetEventsResponse {
	t.Helper()
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back tetragon.GetEventsResponse
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(b, &back); err != nil {
		t.Fatalf("%s does not parse as a GetEventsResponse: %v", b, err)
	}
	return &back
}

// A call's process tree, as berm records it (exec of sh, a fork, the child's exec of cat, what
// cat did, the exits), comes out with the exec ids Tetragon's consumers join on: the child's
// parent_exec_id is the shell's exec_id, every event of cat names cat's exec_id, and each
// names the call's identity where Tetragon puts a pod's.
func TestConvertKeepsTheProcessTree(t *testing.T) {
	t0 := time.Unix(1700000000, 0).UTC()
	base := event.Event{CallID: "c1", CallKey: "c1-key-0123456789abcdef", Tenant: "acme", Tool: "shell", UID: 2000000000}
	at := func(seq uint64, pid, ppid uint32, e event.Event) *event.Event {
		e.CallID, e.CallKey, e.Tenant, e.Tool, e.UID = base.CallID, base.CallKey, base.Tenant, base.Tool, base.UID
		e.Seq, e.PID, e.PPID, e.Time = seq, pid, ppid, t0.Add(time.Duration(seq)*time.Millisecond)
		return &e
	}
	evs := []*event.Event{
		at(1, 10, 9, event.Event{Kind: event.KindExec, Exec: &event.Exec{Filename: "/bin/sh", ExePath: "/usr/bin/dash", Argv: []string{"sh", "-c", "cat /etc/shadow"}, EUID: 1000}}),
		at(2, 10, 9, event.Event{Kind: event.KindFork, Fork: &event.Fork{ChildPID: 11}, Exe: "/usr/bin/dash"}),
		at(3, 11, 10, event.Event{Kind: event.KindExec, Exec: &event.Exec{Filename: "/bin/cat", ExePath: "/usr/bin/cat", Argv: []string{"cat", "/etc/shadow"}, EUID: 1000}}),
		at(4, 11, 10, event.Event{Kind: event.KindOpen, Exe: "/usr/bin/cat", Open: &event.Open{Path: "/etc/shadow", Result: -13, Errno: "EACCES"}}),
		at(5, 11, 10, event.Event{Kind: event.KindDenial, Exe: "/usr/bin/cat", Denial: &event.Denial{Layer: "landlock", Surface: "policy", Rule: "spec.filesystem.deny[0]", Object: "/etc/shadow"}}),
		at(6, 11, 10, event.Event{Kind: event.KindConnect, Exe: "/usr/bin/cat", Connect: &event.Connect{Family: "inet", Addr: "10.0.0.1", Port: 443, Result: -1, Errno: "EPERM"}}),
		at(7, 11, 10, event.Event{Kind: event.KindAlert, Exe: "/usr/bin/cat", Alert: &event.Alert{RuleID: "read-shadow", Title: "Shadow read", Severity: "high", Surface: "credential", EventSeq: 4}}),
		at(8, 11, 10, event.Event{Kind: event.KindExit, Exe: "/usr/bin/cat", Exit: &event.Exit{Code: 1}}),
		at(9, 10, 9, event.Event{Kind: event.KindExit, Exe: "/usr/bin/dash", Exit: &event.Exit{Signal: 9}}),
		at(10, 10, 9, event.Event{Kind: event.KindLimit, Limit: &event.Limit{Resource: "memory"}}),
	}
	c := New("node-a")
	var out []*tetragon.GetEventsResponse
	for _, e := range evs {
		if r := c.Convert(e); r != nil {
			out = append(out, roundTrip(t, r))
		}
	}
	if len(out) != 8 {
		t.Fatalf("%d Tetragon events for 10 berm events (a fork and a limit have none), want 8", len(out))
	}
	sh, cat := out[0].GetProcessExec(), out[1].GetProcessExec()
	if sh == nil || cat == nil {
		t.Fatalf("the first two are not process_exec: %v", out[:2])
	}
	if sh.Process.Binary != "/usr/bin/dash" || sh.Process.Arguments != `-c "cat /etc/shadow"` || sh.Process.Uid.GetValue() != 1000 {
		t.Errorf("sh's process: %v", sh.Process)
	}
	if cat.Process.ParentExecId != sh.Process.ExecId || cat.Parent.GetExecId() != sh.Process.ExecId {
		t.Errorf("cat's parent_exec_id %q / parent %q, want the shell's exec_id %q", cat.Process.ParentExecId, cat.Parent.GetExecId(), sh.Process.ExecId)
	}
	if cat.Process.ExecId == sh.Process.ExecId {
		t.Error("cat and sh share an exec_id")
	}
	for i, r := range out[2:6] {
		var p *tetragon.Process
		switch {
		case r.GetProcessKprobe() != nil:
			p = r.GetProcessKprobe().Process
		case r.GetProcessLsm() != nil:
			p = r.GetProcessLsm().Process
		default:
			t.Fatalf("event %d: %v", i+2, r)
		}
		if p.ExecId != cat.Process.ExecId {
			t.Errorf("event %d names exec_id %q, want cat's %q", i+2, p.ExecId, cat.Process.ExecId)
		}
		if p.Pod.GetNamespace() != "acme" || p.Pod.GetName() != "c1" || p.Pod.GetWorkload() != "shell" || p.Pod.PodLabels[LabelCallKey] != base.CallKey {
			t.Errorf("event %d's pod: %v", i+2, p.Pod)
		}
	}
	if lsm := out[3].GetProcessLsm(); lsm.GetAction() != tetragon.KprobeAction_KPROBE_ACTION_OVERRIDE || lsm.GetPolicyName() != "spec.filesystem.deny[0]" || lsm.GetFunctionName() != "landlock" {
		t.Errorf("the denial: %v", lsm)
	}
	if kp := out[4].GetProcessKprobe(); kp.GetArgs()[0].GetSockaddrArg().GetAddr() != "10.0.0.1" || kp.GetReturn().GetLongArg() != -1 {
		t.Errorf("the connect: %v", kp)
	}
	if exit := out[6].GetProcessExit(); exit.GetProcess().GetExecId() != cat.Process.ExecId || exit.GetStatus() != 1 || exit.GetParent().GetExecId() != sh.Process.ExecId {
		t.Errorf("cat's exit: %v", exit)
	}
	if exit := out[7].GetProcessExit(); exit.GetSignal() != "SIGKILL" || exit.GetProcess().GetExecId() != sh.Process.ExecId {
		t.Errorf("sh's exit: %v", exit)
	}
	if c.Unshaped[event.KindLimit] != 1 {
		t.Errorf("the limit event was not counted as unshaped: %v", c.Unshaped)
	}
}

// Two calls with the same pids never share a process: exec ids carry the call.
func TestConvertKeepsCallsApart(t *testing.T) {
	c := New("n")
	mk := func(key string) *event.Event {
		return &event.Event{CallID: key, CallKey: key, Kind: event.KindExec, PID: 5, PPID: 4, Time: time.Unix(1, 0), Exec: &event.Exec{Filename: "/bin/true"}}
	}
	a, b := c.Convert(mk("a")).GetProcessExec(), c.Convert(mk("b")).GetProcessExec()
	if a.Process.ExecId == b.Process.ExecId || a.Parent.ExecId == b.Parent.ExecId {
		t.Fatalf("two calls' pid 5 share an exec id: %q %q", a.Process.ExecId, b.Process.ExecId)
	}
	if a.Parent.Flags != "unknown" {
		t.Errorf("a parent the stream never showed is flagged %q, want unknown", a.Parent.Flags)
	}
}
