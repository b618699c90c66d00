package query

import (
	"fmt"

	"github.com/bermsec/berm/agent/event"
)

// SurfaceStates, worst first: a cell of the matrix shows the worst state of its calls, and
// "violated" on top of any of them when violations were attributed to the surface.
var SurfaceStates = []string{"violated", event.StateAbsent, event.StateDegraded, event.StateAudit, event.StateEnforced}

// violated is true for a calls row whose record attributed violations (denials, alerts, limit
// hits) to surface s (migration 0006's parallel arrays).
func violated(s string) string {
	return fmt.Sprintf("arrayExists((s, v) -> s = %s AND v > 0, surfaces, surface_violations)", Quote(s))
}

// anyViolation is true for a calls row with violations on any surface.
func anyViolation() string { return "arraySum(surface_violations) > 0" }

// surfaceJoin gives one row per call and surface: surface, state, v (violations), layers
// (resized to surfaces: a row written without them gives [] each, not an ARRAY JOIN size
// mismatch).
const surfaceJoin = "ARRAY JOIN surfaces AS surface, surface_states AS state, surface_violations AS v, " + layersOf + " AS layers"

// layersOf is surface_layers with one element per surface.
const layersOf = "arrayResize(surface_layers, length(surfaces))"

// injectCalls counts the rows of a surfaceJoin whose surface had the inject layer: the
// credential surface of calls whose secrets berm's egress injected (the matrix shows
// "enforced (inject)").
var injectCalls = "countIf(has(layers, " + Quote(event.LayerInject) + "))"
