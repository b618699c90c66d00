package policy

import (
	"slices"

	"github.com/bermsec/berm/agent/event"
)

// surfaceLayers are the layers that bound each surface. A layer may serve several (the
// call's cgroup isolates it and carries its caps).
var surfaceLayers = map[string][]string{
	event.SurfaceIsolation:     {event.LayerCgroup, event.LayerNamespaces, event.LayerNoNewPrivs, event.LayerMount, event.LayerCapabilities},
	event.SurfaceResource:      {event.LayerCgroup},
	event.SurfacePolicy:        {event.LayerLandlock, event.LayerSeccomp, event.LayerCgroupSock, event.LayerLSM, event.LayerLeftovers},
	event.SurfaceCredential:    {event.LayerCredentials},
	event.SurfaceApproval:      {event.LayerApproval},
	event.SurfaceObservability: {event.LayerTrace},
}

// SurfaceFacts are what a call's record knows of its surfaces.
type SurfaceFacts struct {
	// Layers are the layers active for the call (attached to it, not merely available).
	Layers []string
	// Refused are layers the call's configuration asked for that the kernel refused (BPF LSM
	// on a kernel without trampolines): the surfaces they serve are degraded.
	Refused []string
	// Audit: the policy's mode is audit, the policy surface records and blocks nothing.
	Audit bool
	// Caps: the call ran under resource caps (without any, the resource surface is absent).
	Caps bool
	// Complete: the trail holds every event; a trail with events lost is degraded
	// observability.
	Complete bool
	Denials  map[string]uint64 // surface -> denials (audit mode's would-be denials too)
	Alerts   map[string]uint64 // surface -> alerts
	Limits   uint64            // cap hits, all the resource surface's
}

// SurfaceStates computes the state of each surface, in event.Surfaces order.
func SurfaceStates(f SurfaceFacts) []event.SurfaceState {
	out := make([]event.SurfaceState, 0, len(event.Surfaces))
	for _, s := range event.Surfaces {
		st := event.SurfaceState{Surface: s, Layers: []string{}}
		var refused bool
		for _, l := range surfaceLayers[s] {
			if slices.Contains(f.Layers, l) {
				st.Layers = append(st.Layers, l)
			}
			refused = refused || slices.Contains(f.Refused, l)
		}
		if s == event.SurfaceResource && !f.Caps {
			// The cgroup is there for every call; without caps it bounds nothing.
			st.Layers = st.Layers[:0]
		}
		switch {
		case refused || s == event.SurfaceObservability && len(st.Layers) > 0 && !f.Complete:
			st.State = event.StateDegraded
		case len(st.Layers) == 0:
			st.State = event.StateAbsent
		case s == event.SurfacePolicy && f.Audit:
			st.State = event.StateAudit
		default:
			st.State = event.StateEnforced
		}
		st.Violations = f.Denials[s] + f.Alerts[s]
		if s == event.SurfaceResource {
			st.Violations += f.Limits
		}
		st.Violated = st.Violations > 0
		out = append(out, st)
	}
	return out
}
