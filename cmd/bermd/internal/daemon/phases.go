package daemon

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/sandboxer"
)

// Served is one call as the server saw it: when its connection was accepted, its request
// read, its launch returned and its reply written. With the record's start (taken just before
// the call is registered with the agent) and end (after the end barrier), they split a launch
// into phases.
type Served struct {
	CallID                               string
	Record                               *event.CallRecord // nil: the call did not run
	Accepted, Request, Launched, Replied time.Time
	// Timeline is the launch's finer phases, from the connection accepted to the reply.
	Timeline *sandboxer.Timeline
}

// Phases are the server's phases of one call, in order; zero for one that did not happen.
type Phases struct {
	// Connect: the accepted connection to the request read (the stdio and the request's JSON).
	Connect time.Duration
	// Prepare: the request read to the call's start (policy loaded and compiled, workspace
	// opened, a warm sandbox claimed or a cold one started).
	Prepare time.Duration
	// Run: the call's start to its record (registration, init set-up, the tool, the end
	// barrier that waits for its last event).
	Run time.Duration
	// Reply: the record to the reply written.
	Reply time.Duration
}

// Phases splits a served call.
func (s Served) Phases() Phases {
	p := Phases{Connect: s.Request.Sub(s.Accepted)}
	if s.Record == nil {
		return p
	}
	p.Prepare = s.Record.Start.Sub(s.Request)
	p.Run = s.Record.End.Sub(s.Record.Start)
	p.Reply = s.Replied.Sub(s.Record.End)
	return p
}

// PhaseMetrics is a histogram of each phase of the calls served, on a registry. The call id
// is never a label: it would make one series per call.
type PhaseMetrics struct{ h, launch *prometheus.HistogramVec }

// NewPhaseMetrics registers berm_call_phase_seconds{phase}.
func NewPhaseMetrics(reg prometheus.Registerer) *PhaseMetrics {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "berm_call_phase_seconds",
		Help: "Time of each phase of a call served by bermd: connect (request read), prepare (policy compiled, sandbox claimed), run (registration to record, the tool included), reply.",
		// 50 µs to ~3.3 s: a warm launch's phases are tens of µs to a few ms.
		Buckets: prometheus.ExponentialBuckets(50e-6, 2, 17),
	}, []string{"phase"})
	launch := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "berm_launch_phase_seconds",
		Help: "Time of each fine phase of a launch served by bermd (request read, access check, policy compile, pool claim, cgroup create, clone, idmap, registration, the tool, drain barrier, journal, reply...), by the kind of sandbox it ran in (warm, cold).",
		// 10 µs to ~5 s
		Buckets: prometheus.ExponentialBuckets(10e-6, 2, 20),
	}, []string{"phase", "sandbox"})
	reg.MustRegister(h, launch)
	// each phase's series from the start, empty: a histogram first exported with its first
	// call's observation shows no increase to rate(), so that call's latency would not show
	for _, p := range []string{"connect", "prepare", "run", "reply"} {
		h.WithLabelValues(p)
	}
	return &PhaseMetrics{h, launch}
}

// Observe adds a served call.
func (m *PhaseMetrics) Observe(s Served) {
	p := s.Phases()
	m.h.WithLabelValues("connect").Observe(p.Connect.Seconds())
	if s.Record == nil {
		return
	}
	spans, warm := s.Timeline.Spans()
	kind := "cold"
	if warm {
		kind = "warm"
	}
	for _, sp := range spans {
		m.launch.WithLabelValues(sp.Phase, kind).Observe(sp.D.Seconds())
	}
	m.h.WithLabelValues("prepare").Observe(p.Prepare.Seconds())
	m.h.WithLabelValues("run").Observe(p.Run.Seconds())
	m.h.WithLabelValues("reply").Observe(p.Reply.Seconds())
}
