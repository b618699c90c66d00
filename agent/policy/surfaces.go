package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/policy/landlock"
)

// surfaceLayers are the layers that bound each surface. A layer may serve several (the
// call's cgroup isolates it and carries its caps).
var surfaceLayers = map[string][]string{
	event.SurfaceIsolation:     {event.LayerCgroup, event.LayerNamespaces, event.LayerNoNewPrivs, event.LayerMount, event.LayerCapabilities},
	event.SurfaceResource:      {event.LayerCgroup},
	event.SurfacePolicy:        {event.LayerLandlock, event.LayerSeccomp, event.LayerCgroupSock, event.LayerLSM, event.LayerLeftovers},
	event.SurfaceCredential:    {event.LayerCredentials, event.LayerInject},
	event.SurfaceApproval:      {event.LayerApproval},
	event.SurfaceObservability: {event.LayerTrace},
}

// SurfaceFacts are what a call's record knows of its surfaces.
type SurfaceFacts struct {
	// Layers are the layers active for the call (attached to it, not merely available).
	Layers []string
	// Refused are layers the call's configuration asked for that the kernel refused (BPF LSM
	// on a kernel without trampolines, or under lockdown). A surface is degraded by one only
	// when what it would enforce for this policy no active layer enforces (Uncovered).
	Refused []string
	// LandlockFS are the file system rights the call's Landlock ruleset handles (0: the call
	// runs under no Landlock ruleset). BPF LSM enforces the same grants; what Landlock handles
	// of them is enforced without it.
	LandlockFS uint64
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

// lsmRights are the file operations BPF LSM enforces of a call's file rules (agent/lsm), each
// with the Landlock rights that enforce the same.
var lsmRights = []struct {
	name string
	need uint64
}{
	{"read", landlock.ReadFile | landlock.ReadDir},
	{"write", landlock.WriteFile},
	{"exec", landlock.Execute},
	{"remove", landlock.RemoveFile | landlock.RemoveDir},
	{"truncate", landlock.Truncate},
	{"mkdir", landlock.MakeDir},
	{"mknod", landlock.MakeReg | landlock.MakeChar | landlock.MakeBlock | landlock.MakeFifo | landlock.MakeSock},
}

// Uncovered says what a refused layer leaves unenforced for this call: "" when the call's
// other layers enforce everything it would have. BPF LSM repeats the call's file rules
// (spec.filesystem) in the kernel's security hooks: in enforce mode Landlock enforces them
// for every right its ABI handles; in audit mode nothing blocks and the tracer's judge
// records every would-be denial the LSM would have.
func (f SurfaceFacts) Uncovered(layer string) string {
	switch layer {
	case event.LayerLSM:
		if f.Audit {
			if slices.Contains(f.Layers, event.LayerTrace) {
				return ""
			}
			return "spec.filesystem's would-be denials are not recorded (no " + event.LayerTrace + " either)"
		}
		var missing []string
		for _, r := range lsmRights {
			if f.LandlockFS&r.need != r.need {
				missing = append(missing, r.name)
			}
		}
		if len(missing) == 0 {
			return ""
		}
		if f.LandlockFS == 0 {
			return "spec.filesystem (read, write, exec and remove rules) is not enforced: no " + event.LayerLandlock + " ruleset either"
		}
		return "spec.filesystem's " + strings.Join(missing, ", ") + " rules are not enforced: this kernel's " + event.LayerLandlock + " does not handle them"
	}
	return "what it enforces is not enforced"
}

// SurfaceStates computes the state of each surface, in event.Surfaces order.
func SurfaceStates(f SurfaceFacts) []event.SurfaceState {
	out := make([]event.SurfaceState, 0, len(event.Surfaces))
	for _, s := range event.Surfaces {
		st := event.SurfaceState{Surface: s, Layers: []string{}}
		var reasons []string
		for _, l := range surfaceLayers[s] {
			if slices.Contains(f.Layers, l) {
				st.Layers = append(st.Layers, l)
			}
			if slices.Contains(f.Refused, l) {
				if u := f.Uncovered(l); u != "" {
					reasons = append(reasons, fmt.Sprintf("%s refused by the kernel: %s", l, u))
				}
			}
		}
		if s == event.SurfaceResource && !f.Caps {
			// The cgroup is there for every call; without caps it bounds nothing.
			st.Layers = st.Layers[:0]
		}
		if s == event.SurfaceObservability && len(st.Layers) > 0 && !f.Complete {
			reasons = append(reasons, "events were lost: the trail is incomplete")
		}
		st.Reason = strings.Join(reasons, "; ")
		switch {
		case st.Reason != "":
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
