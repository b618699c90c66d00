package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bermsec/berm/agent"
	"github.com/bermsec/berm/cmd/bermd/internal/daemon"
	"github.com/bermsec/berm/collector"
	"github.com/bermsec/berm/rules"
	"github.com/bermsec/berm/sandboxer"
)

// startRules loads the shipped ruleset plus --rules files and keeps them reloaded.
func startRules(ctx context.Context, log *slog.Logger, reg prometheus.Registerer, paths []string, none bool) (agent.Evaluator, error) {
	if none {
		return nil, nil
	}
	eng, err := rules.Start(ctx, paths, reg, log)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	log.Info("rules loaded", "rules", eng.Set().Len(), "files", paths)
	return eng, nil
}

// startCollector ships the journal to ClickHouse when a DSN is given; with a cluster, through
// the Distributed tables over it (the DSN's server is one of its shards).
func startCollector(ctx context.Context, log *slog.Logger, reg prometheus.Registerer, stateDir, dsn, cluster string) error {
	if dsn == "" {
		if cluster != "" {
			return fmt.Errorf("--clickhouse-cluster needs --clickhouse")
		}
		return nil
	}
	c, err := collector.New(collector.Config{StateDir: stateDir, DSN: dsn, Cluster: cluster, Registry: reg, Logger: log})
	if err != nil {
		return err
	}
	go func() {
		defer c.Close()
		if err := c.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("collector stopped", "err", err)
		}
	}()
	return nil
}

// sandboxInit is the init bermd starts every call's sandbox with: --init, or berm-init beside
// bermd.
func sandboxInit(flagValue string) (string, error) {
	p := flagValue
	if p == "" {
		self, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("find own binary: %w", err)
		}
		p = filepath.Join(filepath.Dir(self), "berm-init")
	}
	st, err := os.Stat(p)
	if err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("sandbox init %s is not an executable file (build it with make build, or give --init): %v", p, err)
	}
	return p, nil
}

// registerPoolMetrics exports how calls were launched and how many sandboxes wait.
func registerPoolMetrics(reg prometheus.Registerer, p *sandboxer.Pool) {
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "berm_sandbox_launches_warm_total", Help: "Calls launched in a sandbox started ahead of them.",
		}, func() float64 { return float64(p.Warm.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "berm_sandbox_launches_cold_total", Help: "Calls launched in a sandbox started for them (no warm one for their tenant, or a call with network).",
		}, func() float64 { return float64(p.Cold.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "berm_sandboxes_warm", Help: "Sandboxes started and waiting for a call.",
		}, func() float64 { return float64(p.Idle()) }),
		warmByTenant{p},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "berm_sandboxes_starting", Help: "1 while warm sandboxes are being started.",
		}, func() float64 {
			if p.Starting() {
				return 1
			}
			return 0
		}),
	)
}

// warmByTenant exports the warm sandboxes ready per tenant: the pool keeps some for at most
// its MaxTenants tenants, so the label's values are bounded.
type warmByTenant struct{ p *sandboxer.Pool }

var warmByTenantDesc = prometheus.NewDesc("berm_sandboxes_warm_by_tenant", "Sandboxes started and waiting for a call, per tenant (the tenants the pool keeps sandboxes for).", []string{"tenant"}, nil)

func (w warmByTenant) Describe(ch chan<- *prometheus.Desc) { ch <- warmByTenantDesc }

func (w warmByTenant) Collect(ch chan<- prometheus.Metric) {
	for t, n := range w.p.IdleByTenant() {
		ch <- prometheus.MustNewConstMetric(warmByTenantDesc, prometheus.GaugeValue, float64(n), t)
	}
}

// logServed writes a debug line per call with the times of its phases (unix nanoseconds),
// which the launch benchmark joins with the call's timeline for a per-phase breakdown.
func logServed(log *slog.Logger, sv daemon.Served) {
	if !log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	p := sv.Phases()
	sandbox, tenant := "cold", ""
	if _, warm := sv.Timeline.Spans(); warm {
		sandbox = "warm"
	}
	if sv.Record != nil {
		tenant = sv.Record.Tenant
	}
	log.Debug("call served", "call_id", sv.CallID, "tenant", tenant, "sandbox", sandbox, "accepted_ns", sv.Accepted.UnixNano(), "request_ns", sv.Request.UnixNano(),
		"launched_ns", sv.Launched.UnixNano(), "replied_ns", sv.Replied.UnixNano(),
		"connect", p.Connect, "prepare", p.Prepare, "run", p.Run, "reply", p.Reply)
}
