package policy

import "github.com/bermsec/berm/agent/event"

// Limits are the caps this policy sets, and the built-in strict policy's for any it leaves
// out: the one source of a call's default caps. Flags given to `berm run` override them.
func (p *Policy) Limits() event.Limits {
	l := limitsOf(p.Spec.Resources)
	if p == strict() {
		return l
	}
	d := limitsOf(strict().Spec.Resources)
	fill := func(v *int64, def int64) {
		if *v <= 0 {
			*v = def
		}
	}
	fill(&l.MemoryBytes, d.MemoryBytes)
	fill(&l.Pids, d.Pids)
	fill(&l.OutputBytes, d.OutputBytes)
	fill(&l.TmpBytes, d.TmpBytes)
	if l.CPUs <= 0 {
		l.CPUs = d.CPUs
	}
	if l.WallTime <= 0 {
		l.WallTime = d.WallTime
	}
	return l
}

// StrictLimits are the built-in strict policy's caps (a warm sandbox's until its call sets
// its own).
func StrictLimits() event.Limits { return limitsOf(strict().Spec.Resources) }

func limitsOf(r Resources) event.Limits {
	return event.Limits{
		MemoryBytes: r.MemoryBytes, Pids: r.Pids, CPUs: float64(r.MilliCPUs) / 1000, WallTime: r.WallTime,
		OutputBytes: r.OutputBytes, TmpBytes: r.TmpSizeBytes,
	}
}
