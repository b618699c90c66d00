package sandboxer

import (
	"time"

	"github.com/bermsec/berm/agent"
	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/inject"
	"github.com/bermsec/berm/agent/policy"
	"github.com/bermsec/berm/agent/secrets"
	"github.com/bermsec/berm/sandboxer/approval"
)

// Recorder traces calls: the agent loaded in this process (the embedded default, or bermd's).
type Recorder interface {
	Begin(start event.CallStart, opts agent.CallOptions) (CallRecorder, error)
	// StateDir is the node's state directory: a call's pending revokes are written there
	// before its credentials are minted, before it begins.
	StateDir() string
}

// CallRecorder is one call being traced.
type CallRecorder interface {
	Emit(ev event.Event)
	// UpdateNetwork hot-reloads the running call's egress policy, atomically.
	UpdateNetwork(pol *policy.NetPolicy) error
	End(res agent.Result) (*event.CallRecord, error)
	// Release unregisters a call End left registered (Result.Populated) once it is empty.
	Release() error
	// Key is the call's identity (event.CallStart.CallKey), assigned when it began.
	Key() string
	// Secrets is the node's registry of live brokered secrets and its fingerprint key.
	Secrets() *secrets.Registry
	// StateDir is the node's state directory: a call's pending revokes are kept there.
	StateDir() string
	// ExecGate is the call's exec gate in the kernel (approval rules that hold execs).
	ExecGate() approval.ExecGate
	// Inject starts the call's injecting egress for its injected credentials and returns its
	// CA certificate (PEM) for the call's trust store.
	Inject(creds []inject.Credential, life time.Duration) ([]byte, error)
}

// Local records with an in-process agent.
type Local struct{ Agent *agent.Agent }

func (l Local) StateDir() string { return l.Agent.StateDir() }

func (l Local) Begin(start event.CallStart, opts agent.CallOptions) (CallRecorder, error) {
	c, err := l.Agent.Begin(start, opts)
	if err != nil {
		return nil, err
	}
	return localCall{l.Agent, c}, nil
}

type localCall struct {
	a *agent.Agent
	c *agent.Call
}

func (l localCall) Emit(ev event.Event)                             { l.a.Emit(l.c, ev) }
func (l localCall) End(res agent.Result) (*event.CallRecord, error) { return l.a.End(l.c, res) }

func (l localCall) Release() error { return l.a.Release(l.c) }

func (l localCall) Key() string                 { return l.c.Start.CallKey }
func (l localCall) Secrets() *secrets.Registry  { return l.a.Secrets() }
func (l localCall) StateDir() string            { return l.a.StateDir() }
func (l localCall) ExecGate() approval.ExecGate { return l.a.ExecGate(l.c) }

func (l localCall) Inject(creds []inject.Credential, life time.Duration) ([]byte, error) {
	return l.a.Inject(l.c, creds, life)
}

func (l localCall) UpdateNetwork(pol *policy.NetPolicy) error { return l.a.UpdateNetwork(l.c, pol) }
