// Package tetragon writes berm's events as Tetragon's GetEventsResponse, the shape of
// Tetragon's JSON exporter and `tetra getevents -o json`, built with Tetragon's own API types,
// so that a pipeline made for Tetragon's events reads berm's unchanged. README.md beside this
// file has the mapping.
package tetragon

import (
	"encoding/base64"
	"fmt"
	"strings"
	"syscall"

	"github.com/cilium/tetragon/api/v1/tetragon"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/bermsec/berm/agent/event"
)

// Labels berm puts on each process's pod: what Tetragon's consumers group by carries the
// call's identity.
const (
	LabelTenant  = "berm.dev/tenant"
	LabelTool    = "berm.dev/tool"
	LabelCallID  = "berm.dev/call-id"
	LabelCallKey = "berm.dev/call-key"
	// WorkloadKind names a berm tool call where Tetragon has Deployment, Job, ...
	WorkloadKind = "BermToolCall"
)

// Converter turns a stream of events into Tetragon's. It keeps each call's process tree, as
// Tetragon's process cache does, so that every event names its process and parent with
// consistent exec ids. Not safe for concurrent use.
type Converter struct {
	Node  string
	calls map[string]map[uint32]*tetragon.Process // call key -> pid -> its process now
	// Unshaped counts the events of kinds Tetragon has no shape for, by kind: they are not
	// written in this format, and the caller says so.
	Unshaped map[event.Kind]int
}

// New returns a converter for the events of node.
func New(node string) *Converter {
	return &Converter{Node: node, calls: map[string]map[uint32]*tetragon.Process{}, Unshaped: map[event.Kind]int{}}
}

// Convert gives e's Tetragon event, or nil (with the kind counted in Unshaped) for a kind it
// has no shape for; fork and exit keep the process tree as well.
func (c *Converter) Convert(e *event.Event) *tetragon.GetEventsResponse {
	procs := c.calls[e.Key()]
	if procs == nil {
		procs = map[uint32]*tetragon.Process{}
		c.calls[e.Key()] = procs
	}
	resp := &tetragon.GetEventsResponse{NodeName: c.Node, Time: timestamppb.New(e.Time)}
	switch {
	case e.Exec != nil:
		parent := c.process(procs, e, e.PPID, e.ParentExe)
		p := c.newProcess(e, e.PID, execBinary(e.Exec), "execve"+truncFlag(e.Exec.Truncated))
		p.Arguments = arguments(e.Exec.Argv)
		p.Uid = wrapperspb.UInt32(e.Exec.EUID)
		p.ParentExecId = parent.ExecId
		procs[e.PID] = p
		resp.Event = &tetragon.GetEventsResponse_ProcessExec{ProcessExec: &tetragon.ProcessExec{Process: p, Parent: parent}}
		return resp
	case e.Fork != nil:
		// Tetragon writes no event for a clone; its cache learns the child.
		parent := c.process(procs, e, e.PID, e.Exe)
		child := c.newProcess(e, e.Fork.ChildPID, parent.Binary, "clone")
		child.Arguments, child.Uid, child.ParentExecId = parent.Arguments, parent.Uid, parent.ExecId
		procs[e.Fork.ChildPID] = child
		return nil
	case e.Exit != nil:
		p := c.process(procs, e, e.PID, e.Exe)
		delete(procs, e.PID)
		exit := &tetragon.ProcessExit{Process: p, Parent: c.known(procs, e.PPID), Status: uint32(e.Exit.Code), Time: timestamppb.New(e.Time)}
		if e.Exit.Signal != 0 {
			exit.Signal, exit.Status = unix.SignalName(syscall.Signal(e.Exit.Signal)), 0
		}
		resp.Event = &tetragon.GetEventsResponse_ProcessExit{ProcessExit: exit}
		return resp
	case e.Open != nil:
		kp := c.kprobe(procs, e, "sys_openat", e.Open.Result)
		kp.Args = []*tetragon.KprobeArgument{
			{Label: "file", Arg: &tetragon.KprobeArgument_FileArg{FileArg: &tetragon.KprobeFile{Path: openPath(e.Open), Flags: openFlags(e.Open.Flags)}}},
			{Label: "flags", Arg: &tetragon.KprobeArgument_UintArg{UintArg: e.Open.Flags}},
		}
		kp.Message = e.Open.Errno
		resp.Event = &tetragon.GetEventsResponse_ProcessKprobe{ProcessKprobe: kp}
		return resp
	case e.Connect != nil:
		kp := c.kprobe(procs, e, "sys_connect", e.Connect.Result)
		kp.Args = []*tetragon.KprobeArgument{{Label: "address", Arg: &tetragon.KprobeArgument_SockaddrArg{SockaddrArg: &tetragon.KprobeSockaddr{
			Family: sockFamily(e.Connect.Family), Addr: e.Connect.Addr, Port: uint32(e.Connect.Port)}}}}
		kp.Message = e.Connect.Errno
		resp.Event = &tetragon.GetEventsResponse_ProcessKprobe{ProcessKprobe: kp}
		return resp
	case e.Syscall != nil:
		s := e.Syscall
		kp := c.kprobe(procs, e, "sys_"+s.Name, s.Result)
		for _, p := range []struct{ label, path string }{{"path", s.Path}, {"path2", s.Path2}} {
			if p.path != "" {
				kp.Args = append(kp.Args, &tetragon.KprobeArgument{Label: p.label, Arg: &tetragon.KprobeArgument_PathArg{PathArg: &tetragon.KprobePath{Path: p.path}}})
			}
		}
		for i, a := range s.Args {
			kp.Args = append(kp.Args, &tetragon.KprobeArgument{Label: fmt.Sprintf("arg%d", i), Arg: &tetragon.KprobeArgument_SizeArg{SizeArg: a}})
		}
		kp.Message = s.Errno
		resp.Event = &tetragon.GetEventsResponse_ProcessKprobe{ProcessKprobe: kp}
		return resp
	case e.Denial != nil:
		d := e.Denial
		action := tetragon.KprobeAction_KPROBE_ACTION_OVERRIDE // refused: the call's result was overridden
		verb := "denied"
		if d.Audit {
			action, verb = tetragon.KprobeAction_KPROBE_ACTION_POST, "would deny (audit)"
		}
		p := c.process(procs, e, e.PID, e.Exe)
		resp.Event = &tetragon.GetEventsResponse_ProcessLsm{ProcessLsm: &tetragon.ProcessLsm{
			Process: p, Parent: c.known(procs, e.PPID),
			FunctionName: d.Layer, PolicyName: d.Rule, Action: action,
			Message: fmt.Sprintf("%s %s: %s", d.Layer, verb, d.Object),
			Args:    []*tetragon.KprobeArgument{{Label: "object", Arg: &tetragon.KprobeArgument_StringArg{StringArg: d.Object}}},
			Tags:    []string{"berm.surface." + d.Surface},
		}}
		return resp
	case e.Alert != nil:
		a := e.Alert
		kp := c.kprobe(procs, e, "berm_alert", 0)
		kp.Return = nil
		kp.PolicyName, kp.Message = a.RuleID, a.Title
		kp.Args = []*tetragon.KprobeArgument{
			{Label: "output", Arg: &tetragon.KprobeArgument_StringArg{StringArg: a.Output}},
			{Label: "severity", Arg: &tetragon.KprobeArgument_StringArg{StringArg: a.Severity}},
			{Label: "event_seq", Arg: &tetragon.KprobeArgument_SizeArg{SizeArg: a.EventSeq}},
		}
		kp.Tags = append([]string{"berm.severity." + a.Severity, "berm.surface." + a.Surface}, a.Technique...)
		resp.Event = &tetragon.GetEventsResponse_ProcessKprobe{ProcessKprobe: kp}
		return resp
	case e.Drop != nil:
		resp.Event = &tetragon.GetEventsResponse_RateLimitInfo{RateLimitInfo: &tetragon.RateLimitInfo{
			NumberOfDroppedProcessEvents: e.Drop.Kernel + e.Drop.User + e.Drop.DNS}}
		return resp
	}
	c.Unshaped[e.Kind]++
	return nil
}

// End forgets a call's processes (its record is in: no event of it follows).
func (c *Converter) End(callKey string) { delete(c.calls, callKey) }

func (c *Converter) kprobe(procs map[uint32]*tetragon.Process, e *event.Event, fn string, result int64) *tetragon.ProcessKprobe {
	return &tetragon.ProcessKprobe{
		Process: c.process(procs, e, e.PID, e.Exe), Parent: c.known(procs, e.PPID),
		FunctionName: fn, Action: tetragon.KprobeAction_KPROBE_ACTION_POST, PolicyName: "berm",
		Return: &tetragon.KprobeArgument{Arg: &tetragon.KprobeArgument_LongArg{LongArg: result}},
	}
}

// process is pid's process in the call: the one its last exec or clone made, or, for a
// process whose start the stream did not show (before --since, or berm's own set-up), one
// made from what the event knows, flagged "unknown" as Tetragon flags a cache miss.
func (c *Converter) process(procs map[uint32]*tetragon.Process, e *event.Event, pid uint32, exe string) *tetragon.Process {
	if p := procs[pid]; p != nil {
		return p
	}
	p := c.newProcess(e, pid, exe, "unknown")
	p.StartTime = nil
	p.ExecId = c.execID(e.Key(), pid, 0)
	procs[pid] = p
	return p
}

// known is pid's process when the stream has seen it, nil otherwise (Tetragon leaves an
// unknown parent out).
func (c *Converter) known(procs map[uint32]*tetragon.Process, pid uint32) *tetragon.Process {
	return procs[pid]
}

func (c *Converter) newProcess(e *event.Event, pid uint32, binary, flags string) *tetragon.Process {
	return &tetragon.Process{
		ExecId:    c.execID(e.Key(), pid, e.Time.UnixNano()),
		Pid:       wrapperspb.UInt32(pid),
		Uid:       wrapperspb.UInt32(e.UID),
		Binary:    binary,
		Flags:     flags,
		StartTime: timestamppb.New(e.Time),
		Docker:    docker(e.Key()),
		Pod:       pod(e),
	}
}

// execID identifies a process over time across nodes, as Tetragon's does (base64 of the node,
// a start time and the pid), with the call's key so that two calls' pids never meet.
func (c *Converter) execID(callKey string, pid uint32, startNs int64) string {
	return base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "%s:%s:%d:%d", c.Node, callKey, startNs, pid))
}

func pod(e *event.Event) *tetragon.Pod {
	return &tetragon.Pod{
		Namespace: e.Tenant, Name: e.CallID, Workload: e.Tool, WorkloadKind: WorkloadKind,
		Container: &tetragon.Container{Id: e.Key(), Name: e.Tool},
		PodLabels: map[string]string{LabelTenant: e.Tenant, LabelTool: e.Tool, LabelCallID: e.CallID, LabelCallKey: e.Key()},
	}
}

// docker is Tetragon's short container id: the first 15 characters of the call's key.
func docker(key string) string {
	if len(key) > 15 {
		return key[:15]
	}
	return key
}

func execBinary(x *event.Exec) string {
	if x.ExePath != "" {
		return x.ExePath
	}
	return x.Filename
}

func truncFlag(t bool) string {
	if t {
		return " truncArgs"
	}
	return ""
}

// arguments is argv after the program, as Tetragon writes it: space-separated, an argument
// holding a space or a quote in double quotes.
func arguments(argv []string) string {
	if len(argv) < 2 {
		return ""
	}
	out := make([]string, 0, len(argv)-1)
	for _, a := range argv[1:] {
		if a == "" || strings.ContainsAny(a, " \t\n\"") {
			a = fmt.Sprintf("%q", a)
		}
		out = append(out, a)
	}
	return strings.Join(out, " ")
}

func openPath(o *event.Open) string {
	if o.ResolvedPath != "" {
		return o.ResolvedPath
	}
	return o.Path
}

// openFlags names the access mode and the flags consumers filter on.
func openFlags(f uint32) string {
	var names []string
	switch f & unix.O_ACCMODE {
	case unix.O_RDONLY:
		names = append(names, "O_RDONLY")
	case unix.O_WRONLY:
		names = append(names, "O_WRONLY")
	case unix.O_RDWR:
		names = append(names, "O_RDWR")
	}
	for _, fl := range []struct {
		bit  uint32
		name string
	}{{unix.O_CREAT, "O_CREAT"}, {unix.O_TRUNC, "O_TRUNC"}, {unix.O_APPEND, "O_APPEND"}, {unix.O_EXCL, "O_EXCL"}, {unix.O_DIRECTORY, "O_DIRECTORY"}, {unix.O_PATH, "O_PATH"}, {unix.O_TMPFILE &^ unix.O_DIRECTORY, "O_TMPFILE"}} {
		if f&fl.bit == fl.bit {
			names = append(names, fl.name)
		}
	}
	return strings.Join(names, "|")
}

// sockFamily is Tetragon's name of a socket family.
func sockFamily(f string) string {
	switch f {
	case "inet":
		return "AF_INET"
	case "inet6":
		return "AF_INET6"
	case "unix":
		return "AF_UNIX"
	}
	return f
}
