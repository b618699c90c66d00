package approval

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RubberStamp is the decision latency under which a person's answer counts as quick: a high
// share of quick approvals says requests are waved through unread.
const RubberStamp = 2 * time.Second

type metrics struct {
	requests  prometheus.Counter
	decisions *prometheus.CounterVec
	refused   *prometheus.CounterVec // decision attempts refused, by channel and why
	latency   prometheus.Histogram
	quick     prometheus.Counter // decided by a person in under RubberStamp
	byPerson  prometheus.Counter // decided by a person at all

	quickN, personN atomic.Int64
}

// newMetrics registers the approval metrics; no call id in any label.
func newMetrics(reg prometheus.Registerer, pending func() float64) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounter(prometheus.CounterOpts{Name: "berm_approval_requests_total",
			Help: "Actions held for a person's decision."}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "berm_approval_decisions_total",
			Help: "Approval requests ended, by outcome (approved, denied, timeout, ended, repeat)."}, []string{"outcome"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "berm_approval_refused_decisions_total",
			Help: "Decision attempts refused, by channel and reason (not-approver, impersonation, unauthenticated)."}, []string{"channel", "reason"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "berm_approval_decision_seconds",
			Help:    "Time from an approval request to its decision by a person (timeouts excluded).",
			Buckets: []float64{0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900}}),
		quick: prometheus.NewCounter(prometheus.CounterOpts{Name: "berm_approval_quick_decisions_total",
			Help: "Decisions by a person in under 2 s: a high share of these is a rubber-stamp signal."}),
		byPerson: prometheus.NewCounter(prometheus.CounterOpts{Name: "berm_approval_person_decisions_total",
			Help: "Decisions by a person (approve or deny through the API or the prompt)."}),
	}
	// Every outcome's series exists from the start at 0: a counter first exported at its
	// first deny's 1 shows no increase to rate(), so the first denials would not show.
	for _, o := range []string{Approved, Denied, Timeout, Ended, Repeated} {
		m.decisions.WithLabelValues(o)
	}
	for _, c := range []string{ChannelAPI, ChannelPrompt} {
		for _, why := range []string{RefusedNotApprover, RefusedImpersonation, RefusedUnauthenticated} {
			m.refused.WithLabelValues(c, why)
		}
	}
	if reg == nil {
		return m, nil
	}
	share := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "berm_approval_quick_share",
		Help: "Share of decisions by a person made in under 2 s (0 before any)."}, func() float64 {
		return m.share()
	})
	gauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "berm_approvals_pending",
		Help: "Approval requests waiting for a decision."}, pending)
	for _, c := range []prometheus.Collector{m.requests, m.decisions, m.refused, m.latency, m.quick, m.byPerson, share, gauge} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) share() float64 {
	p := m.personN.Load()
	if p == 0 {
		return 0
	}
	return float64(m.quickN.Load()) / float64(p)
}

func (m *metrics) observe(d Decision) {
	m.decisions.WithLabelValues(d.Outcome).Inc()
	if d.Channel == ChannelAPI || d.Channel == ChannelPrompt {
		m.byPerson.Inc()
		m.personN.Add(1)
		m.latency.Observe(d.Latency.Seconds())
		if d.Latency < RubberStamp {
			m.quick.Inc()
			m.quickN.Add(1)
		}
	}
}
