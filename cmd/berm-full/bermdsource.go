package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/collector/audit"
	"github.com/bermsec/berm/sandboxer/callproto"
)

// bermdSource reads the trail through bermd (callproto's read request): for a caller that is
// not root, since the journal is root's. bermd answers with the tenants the caller may read
// (bermd --access) and refuses the others.
type bermdSource struct{ socket string }

func (b bermdSource) Calls(f audit.Filter) ([]audit.Call, error) {
	rep, err := callproto.Read(b.socket, &callproto.ReadRequest{Read: callproto.ReadCalls, Tool: f.Tool, Tenant: f.Tenant, Since: f.Since})
	if err != nil {
		return nil, fmt.Errorf("bermd: %w", err)
	}
	var calls []audit.Call
	if err := json.Unmarshal(rep.Calls, &calls); err != nil {
		return nil, fmt.Errorf("bermd's calls: %w", err)
	}
	return calls, nil
}

func (b bermdSource) Timeline(id string) (*audit.Call, []event.Event, error) {
	rep, err := callproto.Read(b.socket, &callproto.ReadRequest{Read: callproto.ReadTimeline, Call: id})
	if rep != nil && rep.NoCall {
		return nil, nil, audit.ErrNoCall
	}
	if err != nil {
		return nil, nil, fmt.Errorf("bermd: %w", err)
	}
	var call audit.Call
	var evs []event.Event
	if err := json.Unmarshal(rep.Call, &call); err != nil {
		return nil, nil, fmt.Errorf("bermd's call: %w", err)
	}
	if err := json.Unmarshal(rep.Events, &evs); err != nil {
		return nil, nil, fmt.Errorf("bermd's events: %w", err)
	}
	return &call, evs, nil
}

// viaBermd: the default journal, read by a caller that is not root.
func viaBermd(stateDir, source string) bool {
	return (source == "" || source == "journal") && stateDir == defaultStateDir && os.Geteuid() != 0
}

const defaultStateDir = "/var/lib/berm"
