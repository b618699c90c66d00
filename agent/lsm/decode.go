package lsm

import (
	"fmt"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/wire"
	"github.com/bermsec/berm/bpf"
)

func init() { wire.Register(bpf.WireBermOpBERM_OP_LSM_DENY, decodeDeny) }

// decodeDeny reads a refusal (or would-be refusal) of the file policy's hooks.
func decodeDeny(e *bpf.WireBermLsmDeny, ev *event.Event) {
	ev.Kind = event.KindDenial
	d := &event.Denial{Layer: event.LayerLSM, Surface: event.SurfacePolicy, Audit: e.Audit != 0,
		Rule: "default-deny", Object: wire.CString(e.Path[:])}
	if e.Rule != 0 {
		d.Rule = fmt.Sprintf("rule-%d", e.Rule)
	}
	ev.Denial = d
}
