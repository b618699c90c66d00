package agent

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/bermsec/berm/agent/event"
)

type metrics struct {
	calls       *prometheus.CounterVec
	active      prometheus.Gauge
	events      *prometheus.CounterVec
	drops       *prometheus.CounterVec
	denials     *prometheus.CounterVec
	malformed   prometheus.Counter
	orphans     prometheus.Counter
	journalErrs prometheus.Counter
	lingering   prometheus.Gauge
	// credentialLeaks: live secrets found in the trail's strings (scrubbed before recording).
	credentialLeaks prometheus.Counter
	// envScansCut: exec environments scanned for secrets while some were live, of which the
	// kernel carried only the first BERM_ENV_MAX - 1 bytes (the rest went unscanned).
	envScansCut prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, ring func() float64, ringSize float64) *metrics {
	m := &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berm_calls_total", Help: "Finished tool calls by end reason.",
		}, []string{"end_reason"}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "berm_calls_active", Help: "Tool calls being traced now.",
		}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berm_events_total", Help: "Events recorded, by kind.",
		}, []string{"kind"}),
		drops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berm_events_dropped_total", Help: "Events lost: in the kernel (ring buffer full) or in the agent (queue full).",
		}, []string{"where"}),
		denials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berm_denials_total", Help: "Denials (and audit-mode would-be denials) by layer and surface.",
		}, []string{"layer", "surface", "mode"}),
		malformed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berm_events_malformed_total", Help: "Ring buffer records that did not match the wire contract.",
		}),
		orphans: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berm_events_orphaned_total", Help: "Events for a cgroup with no call (should stay 0).",
		}),
		journalErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berm_journal_errors_total", Help: "Failed journal appends.",
		}),
		lingering: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "berm_calls_lingering", Help: "Ended calls whose processes survived every kill: still registered and judged until their cgroup is empty.",
		}),
		credentialLeaks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berm_credential_trail_leaks_total", Help: "Brokered secrets found in events' arguments, paths or addresses (redacted before recording).",
		}),
		envScansCut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berm_credential_env_scans_cut_total", Help: "Exec environments scanned for live secrets past whose kernel bound (BERM_ENV_MAX) nothing was scanned.",
		}),
	}
	if reg == nil {
		return m
	}
	reg.MustRegister(m.calls, m.active, m.events, m.drops, m.denials, m.malformed, m.orphans, m.journalErrs, m.lingering, m.credentialLeaks, m.envScansCut,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "berm_ringbuf_pending_bytes", Help: "Bytes waiting in the event ring buffer.",
		}, ring),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "berm_ringbuf_size_bytes", Help: "Size of the event ring buffer.",
		}, func() float64 { return ringSize }),
	)
	// Every series exists from the start at 0: a counter first exported at a value shows no
	// increase to rate(), so a kind's first events (or the first drops) would not show.
	for _, k := range []string{"kernel", "user"} {
		m.drops.WithLabelValues(k)
	}
	for _, k := range event.Kinds {
		m.events.WithLabelValues(string(k))
	}
	return m
}

// NewRegistry is a dedicated registry with the Go and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
