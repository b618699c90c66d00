// Command bermd is berm's node agent daemon: it keeps the eBPF programs loaded, serves
// `berm run` over a root-only unix socket and exports Prometheus metrics.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/bermsec/berm/agent"
	"github.com/bermsec/berm/agent/daemon"
	"github.com/bermsec/berm/agent/probe"
)

func main() {
	stateDir := flag.String("state-dir", "/var/lib/berm", "state directory (journal)")
	socket := flag.String("socket", daemon.DefaultSocket, "control socket")
	metricsAddr := flag.String("metrics", "127.0.0.1:9464", "address for /metrics (empty: off)")
	clickhouse := flag.String("clickhouse", "", "ship the journal to this ClickHouse DSN (clickhouse://HOST:PORT/DB)")
	var rulePaths multi
	flag.Var(&rulePaths, "rules", "detection rule files or directories (default: the shipped ruleset; repeatable)")
	noRules := flag.Bool("no-rules", false, "evaluate no detection rules")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(log, *stateDir, *socket, *metricsAddr, *clickhouse, rulePaths, *noRules); err != nil {
		log.Error("bermd failed", "err", err)
		os.Exit(1)
	}
}

type multi []string

func (m *multi) String() string     { return fmt.Sprint(*m) }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func run(log *slog.Logger, stateDir, socket, metricsAddr, dsn string, rulePaths []string, noRules bool) error {
	if os.Geteuid() != 0 {
		return errors.New("bermd needs root (eBPF, cgroups)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	report := probe.Run()
	log.Info("kernel probed", "kernel", report.Kernel, "layers", report.Layers, "refused", report.Missing)

	reg := agent.NewRegistry()
	ev, err := startRules(ctx, log, reg, rulePaths, noRules)
	if err != nil {
		return err
	}
	a, err := agent.New(agent.Config{StateDir: stateDir, Registry: reg, Logger: log, Rules: ev})
	if err != nil {
		return err
	}
	defer a.Close()

	srv := &daemon.Server{Agent: a, Log: log}
	if err := srv.Listen(socket); err != nil {
		return err
	}
	go func() {
		if err := srv.Serve(); err != nil {
			log.Error("control socket", "err", err)
			stop()
		}
	}()
	defer srv.Close()

	if err := startCollector(ctx, log, reg, stateDir, dsn); err != nil {
		return err
	}
	if metricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		hs := &http.Server{Addr: metricsAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := hs.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server", "err", err)
			}
		}()
		defer hs.Close()
	}
	log.Info("bermd ready", "socket", socket, "metrics", metricsAddr, "state_dir", stateDir)
	<-ctx.Done()
	log.Info("bermd stopping")
	return nil
}
