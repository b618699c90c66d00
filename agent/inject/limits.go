package inject

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// What one call may hold of its egress: the tool is hostile, and its egress shares berm's
// process with every other call's.
const (
	// MaxConns bounds a call's open connections to its egress; past it a connection is closed
	// at once (counted, and alerted once per call).
	MaxConns = 128
	// HeadWait bounds a TLS handshake, a request's line and headers, and the wait for the next
	// request of a kept-alive connection: an idle connection cannot keep its slot.
	HeadWait = 30 * time.Second
	// IdleWait bounds each read of a request's body and each write of its response.
	IdleWait = 2 * time.Minute
)

// Metrics are the injecting egresses' counters, one set for the node (no call labels).
type Metrics struct {
	open     prometheus.Gauge
	capped   prometheus.Counter
	idle     prometheus.Counter
	refused  *prometheus.CounterVec
	accepted prometheus.Counter
}

// refusal reasons of berm_inject_requests_refused_total
var refusalRules = []string{"inject-framing", "inject-protocol", "inject-connect", "inject-upgrade", "inject-host-mismatch",
	"inject-foreign-host", "credential-placeholder-misplaced", "inject-response-encoding", "inject-unmoved"}

// NewMetrics registers the egresses' metrics with reg (nil: not exported).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "berm_inject_connections_open", Help: "Connections of calls open to berm's injecting egress now.",
		}),
		accepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berm_inject_connections_total", Help: "Connections of calls the injecting egress accepted (under each call's cap).",
		}),
		capped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berm_inject_connections_refused_total", Help: "Connections to the injecting egress closed at once: their call held its cap of open connections (inject.MaxConns).",
		}),
		idle: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berm_inject_connections_idle_closed_total", Help: "Connections to the injecting egress closed because no handshake or request head came in time (inject.HeadWait).",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berm_inject_requests_refused_total", Help: "Requests (and responses) the injecting egress refused, by rule.",
		}, []string{"rule"}),
	}
	if reg != nil {
		reg.MustRegister(m.open, m.accepted, m.capped, m.idle, m.refused)
	}
	for _, r := range refusalRules {
		m.refused.WithLabelValues(r)
	}
	return m
}

func (m *Metrics) opened(d float64) {
	if m != nil {
		m.open.Add(d)
		if d > 0 {
			m.accepted.Inc()
		}
	}
}

func (m *Metrics) overCap() {
	if m != nil {
		m.capped.Inc()
	}
}

func (m *Metrics) idleClosed() {
	if m != nil {
		m.idle.Inc()
	}
}

func (m *Metrics) refusedBy(rule string) {
	if m != nil {
		m.refused.WithLabelValues(rule).Inc()
	}
}
