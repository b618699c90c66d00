package agent

import "github.com/prometheus/client_golang/prometheus"

// registerQueueMetrics exports the depth of the queue between the ring buffer reader and the
// decoder: a queue that stays full is what precedes user-side drops (berm_events_dropped_total
// {where="user"}), so the agent-health dashboard shows it beside them.
func registerQueueMetrics(reg prometheus.Registerer, depth func() int, capacity int) {
	if reg == nil {
		return
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "berm_queue_batches", Help: "Batches of events waiting between the ring buffer reader and the decoder.",
		}, func() float64 { return float64(depth()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "berm_queue_capacity_batches", Help: "Capacity of the queue between the ring buffer reader and the decoder.",
		}, func() float64 { return float64(capacity) }),
	)
}
