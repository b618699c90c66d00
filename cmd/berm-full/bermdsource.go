package main

import (
	"context"
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

// Events streams the events of the tenants the caller may read, through bermd (the journal is
// root's); following, until ctx ends.
func (b bermdSource) Events(ctx context.Context, f audit.EventFilter, follow bool, fn func(event.Event) error) error {
	req := &callproto.ReadRequest{Call: f.Call, Tenant: f.Tenant, Tool: f.Tool, Since: f.Since, Setup: f.Setup, Follow: follow}
	for _, k := range f.Kinds {
		req.Kinds = append(req.Kinds, string(k))
	}
	err := callproto.StreamEvents(b.socket, req, ctx.Done(), func(raw json.RawMessage) error {
		var e event.Event
		if err := json.Unmarshal(raw, &e); err != nil {
			return fmt.Errorf("bermd's event: %w", err)
		}
		return fn(e)
	})
	if err != nil {
		return fmt.Errorf("bermd: %w", err)
	}
	return nil
}

var _ audit.EventSource = bermdSource{}
