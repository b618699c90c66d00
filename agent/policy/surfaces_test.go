package policy

import (
	"reflect"
	"testing"

	"github.com/bermsec/berm/agent/event"
)

func TestSurfaceStates(t *testing.T) {
	all := []string{event.LayerCgroup, event.LayerNamespaces, event.LayerNoNewPrivs, event.LayerMount,
		event.LayerLandlock, event.LayerSeccomp, event.LayerTrace, event.LayerCgroupSock}
	type want struct {
		state      string
		layers     []string
		violations uint64
	}
	tests := []struct {
		name  string
		facts SurfaceFacts
		want  map[string]want // surfaces not named: absent, no layers, no violations
	}{
		{
			name:  "enforce mode, everything attached, nothing happened",
			facts: SurfaceFacts{Layers: all, Caps: true, Complete: true},
			want: map[string]want{
				event.SurfaceIsolation:     {event.StateEnforced, []string{event.LayerCgroup, event.LayerNamespaces, event.LayerNoNewPrivs, event.LayerMount}, 0},
				event.SurfaceResource:      {event.StateEnforced, []string{event.LayerCgroup}, 0},
				event.SurfacePolicy:        {event.StateEnforced, []string{event.LayerLandlock, event.LayerSeccomp, event.LayerCgroupSock}, 0},
				event.SurfaceObservability: {event.StateEnforced, []string{event.LayerTrace}, 0},
			},
		},
		{
			name: "a policy whose BPF LSM rules the kernel refused is degraded, with its other layers",
			facts: SurfaceFacts{Layers: all, Refused: []string{event.LayerLSM}, Caps: true, Complete: true,
				Denials: map[string]uint64{event.SurfacePolicy: 3}},
			want: map[string]want{
				event.SurfaceIsolation:     {event.StateEnforced, []string{event.LayerCgroup, event.LayerNamespaces, event.LayerNoNewPrivs, event.LayerMount}, 0},
				event.SurfaceResource:      {event.StateEnforced, []string{event.LayerCgroup}, 0},
				event.SurfacePolicy:        {event.StateDegraded, []string{event.LayerLandlock, event.LayerSeccomp, event.LayerCgroupSock}, 3},
				event.SurfaceObservability: {event.StateEnforced, []string{event.LayerTrace}, 0},
			},
		},
		{
			name: "audit mode: the policy surface is audit, its would-be denials and alerts are violations",
			facts: SurfaceFacts{Layers: []string{event.LayerCgroup, event.LayerNamespaces, event.LayerNoNewPrivs, event.LayerSeccomp, event.LayerTrace},
				Audit: true, Caps: true, Complete: true,
				Denials: map[string]uint64{event.SurfacePolicy: 2}, Alerts: map[string]uint64{event.SurfacePolicy: 1, event.SurfaceIsolation: 4}},
			want: map[string]want{
				event.SurfaceIsolation:     {event.StateEnforced, []string{event.LayerCgroup, event.LayerNamespaces, event.LayerNoNewPrivs}, 4},
				event.SurfaceResource:      {event.StateEnforced, []string{event.LayerCgroup}, 0},
				event.SurfacePolicy:        {event.StateAudit, []string{event.LayerSeccomp}, 3},
				event.SurfaceObservability: {event.StateEnforced, []string{event.LayerTrace}, 0},
			},
		},
		{
			name:  "cap hits are the resource surface's; a lost event degrades observability",
			facts: SurfaceFacts{Layers: all, Caps: true, Limits: 1, Complete: false},
			want: map[string]want{
				event.SurfaceIsolation:     {event.StateEnforced, []string{event.LayerCgroup, event.LayerNamespaces, event.LayerNoNewPrivs, event.LayerMount}, 0},
				event.SurfaceResource:      {event.StateEnforced, []string{event.LayerCgroup}, 1},
				event.SurfacePolicy:        {event.StateEnforced, []string{event.LayerLandlock, event.LayerSeccomp, event.LayerCgroupSock}, 0},
				event.SurfaceObservability: {event.StateDegraded, []string{event.LayerTrace}, 0},
			},
		},
		{
			name:  "no caps: the cgroup bounds nothing, resource is absent",
			facts: SurfaceFacts{Layers: []string{event.LayerCgroup, event.LayerTrace}, Complete: true},
			want: map[string]want{
				event.SurfaceIsolation:     {event.StateEnforced, []string{event.LayerCgroup}, 0},
				event.SurfaceObservability: {event.StateEnforced, []string{event.LayerTrace}, 0},
			},
		},
		{
			name: "credential and approval: the broker and the approval gate the call ran under",
			facts: SurfaceFacts{Layers: []string{event.LayerTrace, event.LayerCredentials, event.LayerApproval}, Complete: true,
				Denials: map[string]uint64{event.SurfaceCredential: 1}, Alerts: map[string]uint64{event.SurfaceApproval: 2}},
			want: map[string]want{
				event.SurfaceCredential:    {event.StateEnforced, []string{event.LayerCredentials}, 1},
				event.SurfaceApproval:      {event.StateEnforced, []string{event.LayerApproval}, 2},
				event.SurfaceObservability: {event.StateEnforced, []string{event.LayerTrace}, 0},
			},
		},
		{
			name: "absent and violated: an alert on a surface nothing enforced",
			facts: SurfaceFacts{Layers: []string{event.LayerTrace}, Complete: true,
				Alerts: map[string]uint64{event.SurfaceCredential: 5}},
			want: map[string]want{
				event.SurfaceCredential:    {event.StateAbsent, []string{}, 5},
				event.SurfaceObservability: {event.StateEnforced, []string{event.LayerTrace}, 0},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := SurfaceStates(tt.facts)
			if len(got) != len(event.Surfaces) {
				t.Fatalf("%d surfaces, want %d", len(got), len(event.Surfaces))
			}
			for i, s := range event.Surfaces {
				g := got[i]
				w, ok := tt.want[s]
				if !ok {
					w = want{event.StateAbsent, []string{}, 0}
				}
				if g.Surface != s || g.State != w.state || !reflect.DeepEqual(g.Layers, w.layers) ||
					g.Violations != w.violations || g.Violated != (w.violations > 0) {
					t.Errorf("surface %d: got %+v, want %s %s %v violations %d", i, g, s, w.state, w.layers, w.violations)
				}
			}
		})
	}
}

// Every layer serves a surface, and each layer name there is one of names.go's: a layer
// added to berm without a surface would never show in the matrix.
func TestEveryLayerHasASurface(t *testing.T) {
	layers := []string{event.LayerTrace, event.LayerCgroup, event.LayerNamespaces, event.LayerNoNewPrivs,
		event.LayerMount, event.LayerLandlock, event.LayerSeccomp, event.LayerCgroupSock, event.LayerLSM,
		event.LayerCapabilities, event.LayerLeftovers}
	for _, l := range layers {
		found := false
		for _, ls := range surfaceLayers {
			for _, x := range ls {
				found = found || x == l
			}
		}
		if !found {
			t.Errorf("layer %s serves no surface", l)
		}
	}
}
