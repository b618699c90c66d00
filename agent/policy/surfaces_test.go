package policy

import (
	"reflect"
	"slices"
	"strings"
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
			name: "a policy whose BPF LSM rules the kernel refused, with no Landlock ruleset, is degraded",
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

// The states over policies x the layers a kernel allows (sandboxer/probe's Layers; on this
// machine kind BPF LSM is refused by lockdown), the facts built as the agent builds them
// (agent/surfaces.go): a layer the policy does not need does not degrade it, a refused layer
// whose rules another layer enforces does not either, and a degraded surface names the
// missing layer and the rules it leaves unenforced.
func TestSurfaceStatesOverPoliciesAndProbedLayers(t *testing.T) {
	root := fsTree(t)
	env := func(abi int) CompileEnv {
		return CompileEnv{Workspace: root + "/ws", Tmp: root + "/tmp", LandlockABI: abi, MountInfo: "1 0 0:1 / / rw - ext4 x rw\n"}
	}
	compile := func(p *Policy, abi int) *Compiled {
		t.Helper()
		c, err := p.Compile(env(abi))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	audit := Strict()
	audit.Spec.Mode = Audit
	policies := []struct {
		name string
		c    *Compiled
	}{
		{"strict", compile(Strict(), 0)},
		{"strict on Landlock ABI 2 (no truncate)", compile(Strict(), 2)},
		{"strict in audit mode", compile(audit, 0)},
		{"no policy", nil},
	}
	kernels := []struct {
		name   string
		probed []string // the layers the kernel allows
	}{
		{"BPF LSM allowed", []string{event.LayerTrace, event.LayerCgroupSock, event.LayerLandlock, event.LayerSeccomp, event.LayerLSM}},
		{"BPF LSM refused (lockdown)", []string{event.LayerTrace, event.LayerCgroupSock, event.LayerLandlock, event.LayerSeccomp}},
		{"BPF LSM refused, no tracer", []string{event.LayerCgroupSock, event.LayerLandlock, event.LayerSeccomp}},
	}
	// want[policy][kernel]: the policy surface's state, and a word its reason must hold.
	type want struct{ state, reason string }
	wants := map[string]map[string]want{
		"strict": {
			"BPF LSM allowed":            {event.StateEnforced, ""},
			"BPF LSM refused (lockdown)": {event.StateEnforced, ""},
			"BPF LSM refused, no tracer": {event.StateEnforced, ""},
		},
		"strict on Landlock ABI 2 (no truncate)": {
			"BPF LSM allowed":            {event.StateEnforced, ""},
			"BPF LSM refused (lockdown)": {event.StateDegraded, "bpf-lsm refused by the kernel: spec.filesystem's truncate rules are not enforced"},
			"BPF LSM refused, no tracer": {event.StateDegraded, "truncate"},
		},
		"strict in audit mode": {
			"BPF LSM allowed":            {event.StateAudit, ""},
			"BPF LSM refused (lockdown)": {event.StateAudit, ""},
			"BPF LSM refused, no tracer": {event.StateDegraded, "would-be denials are not recorded"},
		},
		"no policy": {
			"BPF LSM allowed":            {event.StateAbsent, ""},
			"BPF LSM refused (lockdown)": {event.StateAbsent, ""},
			"BPF LSM refused, no tracer": {event.StateAbsent, ""},
		},
	}
	for _, p := range policies {
		for _, k := range kernels {
			t.Run(p.name+"/"+k.name, func(t *testing.T) {
				// As the sandboxer and the agent do: Landlock and seccomp in enforce mode, seccomp
				// in audit mode; the agent's layers where the kernel allows them, BPF LSM refused
				// for a call with a policy where it does not.
				layers := []string{event.LayerCgroup, event.LayerNamespaces, event.LayerNoNewPrivs}
				var refused []string
				var fs uint64
				if p.c != nil {
					layers = append(layers, event.LayerSeccomp)
					if p.c.Mode == Enforce {
						layers = append(layers, event.LayerMount, event.LayerLandlock)
						fs = p.c.Landlock.HandledFS
					}
				}
				for _, l := range []string{event.LayerTrace, event.LayerCgroupSock, event.LayerLSM} {
					switch {
					case slices.Contains(k.probed, l):
						if p.c != nil || l == event.LayerTrace {
							layers = append(layers, l)
						}
					case l == event.LayerLSM && p.c != nil:
						refused = append(refused, l)
					}
				}
				got := SurfaceStates(SurfaceFacts{Layers: layers, Refused: refused, LandlockFS: fs,
					Audit: p.c != nil && p.c.Mode == Audit, Caps: true, Complete: true})
				w := wants[p.name][k.name]
				for _, s := range got {
					if s.Surface != event.SurfacePolicy {
						if s.State == event.StateDegraded {
							t.Errorf("surface %s degraded: %s", s.Surface, s.Reason)
						}
						continue
					}
					if s.State != w.state || (w.reason == "") != (s.Reason == "") || !strings.Contains(s.Reason, w.reason) {
						t.Errorf("policy surface %s (reason %q), want %s (reason with %q)", s.State, s.Reason, w.state, w.reason)
					}
				}
			})
		}
	}
}
