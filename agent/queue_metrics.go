package agent

import "github.com/prometheus/client_golang/prometheus"

// registerQueueMetrics exports how much of the calls' queues (between the ring buffer reader
// and each call's worker) is in use, node-wide: queues that stay full are what precede
// user-side drops (berm_events_dropped_total{where="user"}), so the agent-health dashboard
// shows it beside them.
func registerQueueMetrics(reg prometheus.Registerer, queued func() int64, capacity int64) {
	if reg == nil {
		return
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "berm_queue_bytes", Help: "Bytes of raw records waiting in the calls' queues, node-wide.",
		}, func() float64 { return float64(queued()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "berm_queue_capacity_bytes", Help: "Bytes the calls' queues may hold node-wide; past it records are dropped and counted against their call.",
		}, func() float64 { return float64(capacity) }),
	)
}
