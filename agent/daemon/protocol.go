// Package daemon is bermd's control socket: a root-only unix socket over which `berm run`
// asks the node agent to trace a call. The client launches the tool (it owns the terminal and
// the working directory); the daemon, which keeps the eBPF programs loaded, traces and
// records. One connection is one call; if the client goes away mid-call, the daemon kills the
// call's cgroup and records the call as ended by client_lost.
package daemon

import (
	"github.com/bermsec/berm/agent"
	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/sandboxer/policy"
)

// DefaultSocket is where bermd listens.
const DefaultSocket = "/run/berm/bermd.sock"

type request struct {
	Op     string            `json:"op"` // begin, emit, end
	Start  *event.CallStart  `json:"start,omitempty"`
	Opts   agent.CallOptions `json:"opts"`
	Cgroup string            `json:"cgroup,omitempty"` // v2 directory, killed if the client is lost
	Event  *event.Event      `json:"event,omitempty"`
	Result *agent.Result     `json:"result,omitempty"`
	Net    *policy.NetPolicy `json:"net,omitempty"`
}

type response struct {
	Error  string            `json:"error,omitempty"`
	Record *event.CallRecord `json:"record,omitempty"`
}
