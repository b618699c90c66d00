// Command berm-collector ships a berm journal to ClickHouse: it follows the journal of
// --state-dir and inserts calls, events and alerts into the database of --clickhouse, or with
// --once ships what is there and exits.
//
//	berm-collector --state-dir /var/lib/berm --clickhouse clickhouse://127.0.0.1:9000/default
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/bermsec/berm/cmd/internal/version"
	"github.com/bermsec/berm/collector"
)

func main() {
	if err := run(); err != nil {
		var code exitCode
		if errors.As(err, &code) {
			os.Exit(int(code))
		}
		fmt.Fprintln(os.Stderr, "berm-collector:", err)
		os.Exit(1)
	}
}

// exitCode ends the program while reading its flags (usage or version printed: 0; a bad
// flag said: 2).
type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit %d", int(c)) }

// parseFlags: -h prints the usage on stdout and succeeds, --version the build; a bad flag is
// one line, not the flag package's error and usage.
func parseFlags(showVersion *bool) error {
	fs := flag.CommandLine
	fs.Init("berm-collector", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	err := fs.Parse(os.Args[1:])
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Print("usage: berm-collector --clickhouse DSN [flags]   (or --print-ddl, --migrate, --version)\n\nflags:\n")
		fs.SetOutput(os.Stdout)
		fs.PrintDefaults()
		return exitCode(0)
	case err != nil:
		fmt.Fprintf(os.Stderr, "berm-collector: %v (berm-collector -h lists the flags)\n", err)
		return exitCode(2)
	case *showVersion:
		version.Write(os.Stdout, "berm-collector", nil)
		return exitCode(0)
	}
	return nil
}

// shipped sums a counter of the collector's registry by its table label.
func shipped(reg *prometheus.Registry) map[string]float64 {
	out := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		if mf.GetName() != "berm_collector_rows_shipped_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			table := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "table" {
					table = l.GetValue()
				}
			}
			out[table] += m.GetCounter().GetValue()
		}
	}
	return out
}

func run() error {
	var (
		cfg      collector.Config
		once     bool
		metrics  string
		printDDL string
		onClust  bool
		migrate  bool
		database string
		verbose  bool
	)
	flag.StringVar(&cfg.StateDir, "state-dir", "/var/lib/berm", "berm state directory (the journal is in <state-dir>/journal)")
	flag.StringVar(&cfg.DSN, "clickhouse", "", "ClickHouse DSN, native protocol: clickhouse://host:9000/database")
	flag.BoolVar(&once, "once", false, "ship what the journal holds now and exit")
	flag.IntVar(&cfg.BatchRows, "batch-rows", 50000, "rows per insert")
	flag.DurationVar(&cfg.BatchInterval, "batch-interval", time.Second, "longest a row waits for its batch")
	flag.Int64Var(&cfg.MaxBacklogBytes, "max-backlog-bytes", 1<<30, "unshipped journal size that raises a warning and berm_collector_backlog_over_limit (nothing is deleted)")
	flag.DurationVar(&cfg.Retention, "retention", 0, "TTL of the tables on servers with TTL (0: keep forever), e.g. 2160h")
	flag.StringVar(&cfg.Cluster, "cluster", "", "write through Distributed tables over this ClickHouse cluster (sharded by call id)")
	flag.StringVar(&metrics, "metrics-addr", "", "serve Prometheus metrics on this address (e.g. 127.0.0.1:9464)")
	flag.StringVar(&printDDL, "print-ddl", "", "print the schema for a dialect (legacy or modern) and exit; with --cluster, the sharded layout")
	flag.BoolVar(&onClust, "on-cluster", false, "with --print-ddl and --cluster: add ON CLUSTER to every statement")
	flag.StringVar(&database, "database", "berm", "with --print-ddl: the database the DDL names")
	flag.BoolVar(&migrate, "migrate", false, "apply the schema to the server of --clickhouse (with --cluster: the sharded layout) and exit; run it on every node of a cluster")
	flag.BoolVar(&verbose, "v", false, "debug logging")
	showVersion := flag.Bool("version", false, "print the version and exit")
	if err := parseFlags(showVersion); err != nil {
		return err
	}
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}

	if printDDL != "" {
		ddl, err := collector.DDL(collector.SchemaOptions{
			Database: database, Dialect: collector.Dialect(printDDL), Retention: cfg.Retention,
			Cluster: cfg.Cluster, OnCluster: onClust,
		})
		if err != nil {
			return err
		}
		fmt.Print(ddl)
		return nil
	}
	if cfg.DSN == "" {
		return errors.New("no --clickhouse DSN (clickhouse://host:9000/database)")
	}

	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	reg := prometheus.NewRegistry()
	cfg.Registry = reg

	if migrate {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return collector.MigrateDSN(ctx, cfg.DSN, cfg.Cluster, cfg.Retention, cfg.Logger)
	}
	c, err := collector.New(cfg)
	if err != nil {
		return err
	}
	defer c.Close()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	if metrics != "" {
		srv := &http.Server{Addr: metrics, Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				cfg.Logger.Error("metrics server", "err", err)
			}
		}()
		defer srv.Close()
	}
	if once {
		if err := c.RunOnce(ctx); err != nil {
			return err
		}
		// Say what was shipped: a quiet exit 0 could be an empty journal or a wrong one.
		rows := shipped(reg)
		tables := make([]string, 0, len(rows))
		total := 0.0
		for t, n := range rows {
			tables = append(tables, fmt.Sprintf("%s %.0f", t, n))
			total += n
		}
		sort.Strings(tables)
		if total == 0 {
			fmt.Printf("berm-collector: nothing new to ship in %s/journal\n", cfg.StateDir)
		} else {
			fmt.Printf("berm-collector: shipped %.0f rows to %s (%s)\n", total, collector.RedactDSN(cfg.DSN), strings.Join(tables, ", "))
		}
		return nil
	}
	cfg.Logger.Info("following the journal", "state_dir", cfg.StateDir)
	return c.Run(ctx)
}
