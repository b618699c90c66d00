package query

import (
	"fmt"
	"strings"

	"github.com/bermsec/berm/agent/event"
)

// SurfaceStates, worst first: a cell of the matrix shows the worst state of its calls.
var SurfaceStates = []string{"violated", "absent", "degraded", "audit", "enforced"}

// limitEnds are the end reasons of a call stopped at a resource cap.
var limitEnds = []string{
	string(event.EndTimeout), string(event.EndMemoryLimit), string(event.EndPidsLimit),
	string(event.EndOutputLimit), string(event.EndTmpLimit), string(event.EndDiskLimit),
}

// surfaceLayers are the layers that enforce each surface.
var surfaceLayers = map[string][]string{
	event.SurfaceIsolation:     {event.LayerNamespaces, event.LayerMount, event.LayerNoNewPrivs, event.LayerCapabilities},
	event.SurfaceResource:      {event.LayerCgroup},
	event.SurfacePolicy:        {event.LayerLandlock, event.LayerSeccomp, event.LayerCgroupSock, event.LayerLSM},
	event.SurfaceCredential:    nil,
	event.SurfaceApproval:      nil,
	event.SurfaceObservability: {event.LayerTrace},
}

// violations is the number of denials and limit hits of a call (a calls row) attributed to
// surface s. Alerts are in their own table and are added by the caller.
func violations(s string) string {
	v := fmt.Sprintf("arraySum(arrayFilter((c, x) -> x = %s, denial_counts, denial_surfaces))", Quote(s))
	if s == event.SurfaceResource {
		v += " + toUInt64(end_reason IN (" + quoteList(limitEnds) + "))"
	}
	return "toUInt64(" + v + ")"
}

// surfaceState is the state of surface s for one call (a calls row), alerts aside: derived from
// the call's layers, mode, completeness, denials and end.
func surfaceState(s string) string {
	enforced := "0"
	if ls := surfaceLayers[s]; len(ls) > 0 {
		enforced = "hasAny(layers, [" + quoteList(ls) + "])"
	}
	degraded, audit := "0", "0"
	switch s {
	case event.SurfaceObservability:
		degraded = "complete = 0"
	case event.SurfacePolicy:
		audit = "visitParamExtractString(raw, 'mode') = 'audit'"
	}
	return fmt.Sprintf("multiIf(%s > 0, 'violated', %s, 'degraded', %s, 'audit', %s, 'enforced', 'absent')",
		violations(s), degraded, audit, enforced)
}

// surfaceTuples is an array of (surface, state, violations) for every surface, for ARRAY JOIN.
func surfaceTuples() string {
	var b strings.Builder
	b.WriteString("[")
	for i, s := range event.Surfaces {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "tuple(%s, %s, %s)", Quote(s), surfaceState(s), violations(s))
	}
	b.WriteString("]")
	return b.String()
}

// anyViolation is true for a calls row with a denial or a limit hit on any surface.
func anyViolation() string {
	return "arraySum(denial_counts) > 0 OR end_reason IN (" + quoteList(limitEnds) + ")"
}
