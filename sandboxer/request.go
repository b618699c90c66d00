package sandboxer

import (
	"errors"
	"fmt"
	"os"

	"github.com/bermsec/berm/sandboxer/approval"

	"github.com/bermsec/berm/agent"
	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/sandboxer/callproto"
)

// LoadPolicy resolves a call's policy file (empty: the built-in strict policy) and takes its
// caps (policy.Limits: the one source of defaults) into lim; caps named in explicit (given as
// flags) keep their values.
func LoadPolicy(path string, lim *event.Limits, explicit map[string]bool) (*policy.Policy, error) {
	p := policy.Strict()
	if path != "" {
		var err error
		if p, err = policyFiles.load(path); err != nil {
			return nil, err
		}
	}
	def := p.Limits()
	set := func(flag string, dst *int64, v int64) {
		if !explicit[flag] || *dst <= 0 {
			*dst = v
		}
	}
	set("memory", &lim.MemoryBytes, def.MemoryBytes)
	set("pids", &lim.Pids, def.Pids)
	set("output-limit", &lim.OutputBytes, def.OutputBytes)
	set("tmp-size", &lim.TmpBytes, def.TmpBytes)
	if !explicit["cpus"] || lim.CPUs <= 0 {
		lim.CPUs = def.CPUs
	}
	if !explicit["timeout"] || lim.WallTime <= 0 {
		lim.WallTime = def.WallTime
	}
	return p, nil
}

// FromRequest is the call a request describes, its policy loaded and its caps resolved.
func FromRequest(req *callproto.Request) (Spec, error) {
	explicit := map[string]bool{}
	for _, f := range req.Explicit {
		explicit[f] = true
	}
	lim := req.Limits
	pol, err := LoadPolicy(req.PolicyFile, &lim, explicit)
	if err != nil {
		return Spec{}, err
	}
	for _, f := range []struct{ field, v string }{{"--call-id", req.CallID}, {"--tool", req.Tool}, {"--tenant", req.Tenant}} {
		if err := ValidName(f.field, f.v); err != nil {
			return Spec{}, err
		}
	}
	if len(req.MCPSession) > 256 || len(req.MCPRequestID) > 256 {
		return Spec{}, errors.New("mcp session or request id: more than 256 bytes")
	}
	if err := event.ValidTraceParent(req.TraceParent); err != nil {
		return Spec{}, fmt.Errorf("--traceparent: %w", err)
	}
	return Spec{
		TraceParent: req.TraceParent,
		CallID:      req.CallID, Tool: req.Tool, Tenant: req.Tenant, Argv: req.Argv, Workspace: req.Workspace,
		Env: req.Env, Limits: lim, Policy: pol, PolicyFile: req.PolicyFile,
		Traced: req.Traced, Terminal: req.Terminal, DNSUpstream: req.DNSUpstream,
		MCPSession: req.MCPSession, MCPRequestID: req.MCPRequestID,
	}, nil
}

// Service launches the calls bermd is handed, with its agent and its warm sandboxes.
type Service struct {
	Agent *agent.Agent
	Pool  *Pool
	Init  string
	// Approvals asks people about the calls' held actions (spec.approvals).
	Approvals *approval.Broker
	// Node is the node name the calls' records carry (Spec.Node).
	Node string
}

// Launch runs one call to its end with the caller's stdio; stops end it early.
func (s *Service) Launch(req *callproto.Request, stdio [3]*os.File, stops <-chan callproto.Stop) callproto.Reply {
	return s.LaunchChecked(req, stdio, stops, nil)
}

// LaunchChecked is Launch, with checkWorkspace asked about the workspace the call gets (see
// Spec.CheckWorkspace).
func (s *Service) LaunchChecked(req *callproto.Request, stdio [3]*os.File, stops <-chan callproto.Stop, checkWorkspace func(fd int) error) callproto.Reply {
	return s.LaunchTimed(req, stdio, stops, checkWorkspace, nil)
}

// LaunchTimed is LaunchChecked, with the end of each of the launch's phases marked on tl.
func (s *Service) LaunchTimed(req *callproto.Request, stdio [3]*os.File, stops <-chan callproto.Stop, checkWorkspace func(fd int) error, tl *Timeline) callproto.Reply {
	spec, err := FromRequest(req)
	if err != nil {
		return callproto.Reply{Error: err.Error(), ExitStatus: 125}
	}
	if s.Init == "" {
		return callproto.Reply{Error: "bermd has no sandbox init (berm-init) to launch calls with", ExitStatus: 125}
	}
	spec.Init, spec.Pool, spec.Stops, spec.Approvals, spec.Node = s.Init, s.Pool, stops, s.Approvals, s.Node
	spec.CheckWorkspace, spec.Timeline = checkWorkspace, tl
	spec.Stdin, spec.Stdout, spec.Stderr = stdio[0], stdio[1], stdio[2]
	out, err := Run(spec, Local{Agent: s.Agent})
	if out == nil {
		return callproto.Reply{Error: err.Error(), ExitStatus: 125}
	}
	rep := callproto.Reply{Version: callproto.Version, Record: out.Record, ExitStatus: out.ExitStatus}
	if err != nil {
		rep.Warning = err.Error()
	}
	return rep
}
