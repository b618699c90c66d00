package dnsguard

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bermsec/berm/agent/event"
)

type metrics struct {
	queries  *prometheus.CounterVec
	upstream prometheus.Counter
	pinErrs  prometheus.Counter
	dropped  prometheus.Counter
	leaks    prometheus.Counter
	tunnels  prometheus.Counter
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
		leaks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berm_dns_secret_queries_total", Help: "Queries refused because their name carried a chunk of a live brokered secret (never sent upstream).",
		}),
		tunnels: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "berm_dns_tunnel_runs_total", Help: "Allowed queries whose labels under a wildcard rule read as encoded data (the dns-tunnel-label-run alert is raised once per call and wildcard).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.queries, m.upstream, m.pinErrs, m.dropped, m.leaks, m.tunnels)
	}
	// Every series exists from the start at 0: a counter first exported at its first query's 1
	// shows no increase to rate(), so a panel of the first refusals would stay flat.
	for _, v := range []string{event.DNSAllowed, event.DNSRefused, event.DNSAuditRefused} {
		for _, tr := range []string{"udp", "tcp"} {
			m.queries.WithLabelValues(v, tr)
		}
	}
	return m
}
