package collector

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	rows          *prometheus.CounterVec
	batches       prometheus.Counter
	retries       prometheus.Counter
	errors        *prometheus.CounterVec
	replayed      prometheus.Counter
	problems      prometheus.Counter
	backlog       prometheus.Gauge
	backlogLimit  prometheus.Gauge
	backlogOver   prometheus.Gauge
	shippedOffset prometheus.Gauge

	mu      sync.Mutex
	pending []*batch // batches read from the journal and not yet acknowledged, oldest first
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berm_collector_rows_shipped_total", Help: "Rows acknowledged by ClickHouse, by table.",
		}, []string{"table"}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berm_collector_batches_total", Help: "Batches acknowledged by ClickHouse.",
		}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berm_collector_retries_total", Help: "Batch attempts that failed and were retried.",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berm_collector_errors_total", Help: "Errors by stage (connect, insert, cursor, journal).",
		}, []string{"stage"}),
		replayed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berm_collector_replayed_rows_skipped_total", Help: "Rows of a replayed batch found already in ClickHouse and not inserted again.",
		}),
		problems: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berm_collector_journal_problems_total", Help: "Torn or corrupt journal records skipped.",
		}),
		backlog: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "berm_collector_backlog_bytes", Help: "Journal bytes not yet acknowledged by ClickHouse.",
		}),
		backlogLimit: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "berm_collector_backlog_limit_bytes", Help: "Backlog size past which the collector warns (0: no limit).",
		}),
		backlogOver: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "berm_collector_backlog_over_limit", Help: "1 while the backlog exceeds its limit.",
		}),
		shippedOffset: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "berm_collector_cursor_segment", Help: "Journal segment the cursor is in.",
		}),
	}
	age := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "berm_collector_oldest_unshipped_event_age_seconds",
		Help: "Age of the oldest event read from the journal and not yet acknowledged (0: none).",
	}, m.oldestAge)
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	for _, c := range []prometheus.Collector{m.rows, m.batches, m.retries, m.errors, m.replayed, m.problems, m.backlog, m.backlogLimit, m.backlogOver, m.shippedOffset, age} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) oldestAge() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, b := range m.pending {
		if !b.first.IsZero() {
			return time.Since(b.first).Seconds()
		}
	}
	return 0
}

// opened notes a batch being filled from the journal, noted records its first record's time,
// and acked drops it once ClickHouse has it.
func (m *metrics) opened(b *batch) {
	m.mu.Lock()
	m.pending = append(m.pending, b)
	m.mu.Unlock()
}

func (m *metrics) noted(b *batch, t time.Time) {
	m.mu.Lock()
	if b.first.IsZero() || t.Before(b.first) {
		b.first = t
	}
	m.mu.Unlock()
}

func (m *metrics) acked(b *batch) {
	m.mu.Lock()
	for i, p := range m.pending {
		if p == b {
			m.pending = append(m.pending[:i:i], m.pending[i+1:]...)
			break
		}
	}
	m.mu.Unlock()
}
