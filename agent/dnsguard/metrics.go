package dnsguard

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	queries  *prometheus.CounterVec
	upstream prometheus.Counter
	pinErrs  prometheus.Counter
	dropped  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berm_dns_queries_total", Help: "Queries of calls to berm's resolver, by verdict (allowed, refused, audit-refused) and transport.",
		}, []string{"verdict", "transport"}),
		upstream: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berm_dns_upstream_errors_total", Help: "Allowed queries the upstream did not answer (the call got SERVFAIL).",
		}),
		pinErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berm_dns_pin_errors_total", Help: "Answered addresses that could not be pinned in the kernel (they stay closed).",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berm_dns_queries_dropped_total", Help: "UDP queries of calls the kernel dropped before the resolver read them (a call's resolver socket buffer was full); each call's record counts its own.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.queries, m.upstream, m.pinErrs, m.dropped)
	}
	return m
}
