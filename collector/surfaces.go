package collector

import "github.com/bermsec/berm/agent/event"

// surfaces are the calls table's surface columns: parallel arrays, one element per surface
// of the record (migrations 0006, 0010). A record written before surfaces existed has none.
type surfaces struct {
	names, states, reasons [][]string
	layers                 [][][]string
	violations             [][]uint64
}

func (r *surfaces) add(ss []event.SurfaceState) {
	names := make([]string, len(ss))
	states := make([]string, len(ss))
	reasons := make([]string, len(ss))
	layers := make([][]string, len(ss))
	violations := make([]uint64, len(ss))
	for i, s := range ss {
		names[i], states[i], layers[i], violations[i] = s.Surface, s.State, nonNil(s.Layers), s.Violations
		reasons[i] = s.Reason
	}
	r.reasons = append(r.reasons, reasons)
	r.names = append(r.names, names)
	r.states = append(r.states, states)
	r.layers = append(r.layers, layers)
	r.violations = append(r.violations, violations)
}

func (r *surfaces) columns() []column {
	return []column{
		{"surfaces", r.names}, {"surface_states", r.states},
		{"surface_layers", r.layers}, {"surface_violations", r.violations}, {"surface_reasons", r.reasons},
	}
}
