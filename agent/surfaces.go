package agent

import (
	"slices"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy"
)

// surfaces are the call's surface states for its record: the layers it ran under (the
// kernel layers only if they were attached to this call: the agent lists every layer it has
// in the call's start), what its policy asked for and the kernel refused, and what was
// attributed to each surface.
func (c *Call) surfaces(rec *event.CallRecord, alerts map[string]uint64, limits uint64) []event.SurfaceState {
	layers := slices.DeleteFunc(slices.Clone(rec.Layers), func(l string) bool {
		return l == event.LayerCgroupSock && !c.netAttached || l == event.LayerLSM && !c.lsmAttached
	})
	return policy.SurfaceStates(policy.SurfaceFacts{
		Layers:  layers,
		Refused: c.refused,
		LandlockFS: func() uint64 {
			if c.policy == nil || !slices.Contains(layers, event.LayerLandlock) {
				return 0
			}
			return c.policy.Landlock.HandledFS
		}(),
		Audit:    c.policy != nil && c.policy.Mode == policy.Audit,
		Caps:     rec.Limits != (event.Limits{}),
		Complete: rec.Complete,
		Denials:  rec.Denials,
		Alerts:   alerts,
		Limits:   limits,
	})
}
