// Command bermd is berm's node agent daemon: it keeps the eBPF programs loaded, serves
// `berm run` over a root-only unix socket and exports Prometheus metrics.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/bermsec/berm/agent"
	"github.com/bermsec/berm/agent/dnsguard"
	"github.com/bermsec/berm/cmd/bermd/internal/access"
	"github.com/bermsec/berm/cmd/bermd/internal/daemon"
	"github.com/bermsec/berm/cmd/internal/version"
	"github.com/bermsec/berm/collector/audit"
	"github.com/bermsec/berm/sandboxer"
	"github.com/bermsec/berm/sandboxer/approval"
	"github.com/bermsec/berm/sandboxer/cgroup"
)

func main() {
	stateDir := flag.String("state-dir", "/var/lib/berm", "state directory (journal)")
	socket := flag.String("socket", daemon.DefaultSocket, "control socket")
	metricsAddr := flag.String("metrics", "127.0.0.1:9464", "address for /metrics (empty: off)")
	clickhouse := flag.String("clickhouse", "", "ship the journal to this ClickHouse DSN (clickhouse://HOST:PORT/DB)")
	clickhouseCluster := flag.String("clickhouse-cluster", "", "with --clickhouse: write through Distributed tables over this ClickHouse cluster (sharded by call id; the server the DSN names is one of its shards)")
	var rulePaths multi
	flag.Var(&rulePaths, "rules", "detection rule files or directories (default: the shipped ruleset; repeatable)")
	noRules := flag.Bool("no-rules", false, "evaluate no detection rules")
	initPath := flag.String("init", "", "the sandbox init binary (default: berm-init beside bermd)")
	warmN := flag.Int("warm", 1, "sandboxes each tenant keeps started ahead of its calls (0: start each call's own)")
	pprofOn := flag.Bool("pprof", false, "also serve /debug/pprof/ on the metrics address (profiles of a bermd whose latency degrades)")
	approvalsDir := flag.String("approvals-dir", approval.DefaultDir, "directory of the approval API's socket (root-only)")
	approvalsToken := flag.String("approvals-token", approval.DefaultTokenFile, "the approval API's bearer token file (created root-only when absent)")
	webhookURL := flag.String("approval-webhook", "", "POST each approval request as signed JSON to this URL (empty: off)")
	approversFile := flag.String("approvers", approval.DefaultApproversFile, "who may decide rules naming approvers: people (unix users, API tokens) and groups (root-owned; absent: the names root gives)")
	webhookSecret := flag.String("approval-webhook-secret", "", "file holding the webhook's HMAC-SHA256 key (root-only; required with --approval-webhook)")
	injectCA := flag.String("inject-upstream-ca", "", "PEM file of the roots injected credentials' servers are verified against, instead of the host's (default: $"+agent.InjectRootsEnv+", else the host's roots)")
	dnsUpstream := flag.String("dns-upstream", "", "DNS server networked calls' allowed queries go to, ADDR or ADDR:PORT (default: the first nameserver of /etc/resolv.conf)")
	nodeName := flag.String("node", "", "the node name this bermd's calls, spans and alerts carry (default: the host's name; in a fleet, each node's own, e.g. Kubernetes' spec.nodeName)")
	accessFile := flag.String("access", "", "access file: the users and groups bermd serves besides root, by tenant (run, read, decide, policies); reloaded on SIGHUP (empty: root only)")
	readerStall := flag.Duration("reader-stall", daemon.DefaultReaderStall, "how long a caller reading through the socket (berm events --follow, calls, approvals) may not read what it asked for before bermd drops it")
	// No backquotes in a usage: the flag package takes a quoted word for the value's name.
	idleExit := flag.Duration("idle-exit", 0, "exit after no call for this long (0: never); berm run starts bermd on demand with 5m")
	var level slog.Level
	flag.TextVar(&level, "log-level", slog.LevelInfo, "log level: debug (a line per call with its phases' times), info, warn, error")
	showVersion := flag.Bool("version", false, "print the version and what this kernel lets berm use, and exit")
	if code, done := parseFlags(showVersion); done {
		os.Exit(code)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	o := options{stateDir: *stateDir, socket: *socket, metrics: *metricsAddr, dsn: *clickhouse, cluster: *clickhouseCluster, rules: rulePaths, noRules: *noRules, init: *initPath, warm: *warmN, idleExit: *idleExit, pprof: *pprofOn,
		approvalsDir: *approvalsDir, approvalsToken: *approvalsToken, webhookURL: *webhookURL, webhookSecret: *webhookSecret, approvers: *approversFile, dnsUpstream: *dnsUpstream, access: *accessFile, node: *nodeName, readerStall: *readerStall, injectCA: *injectCA}
	if err := run(log, o); err != nil {
		log.Error("bermd failed", "err", err)
		os.Exit(1)
	}
}

// reloadAccess reads the access file again on SIGHUP; a file with errors is reported and the
// access in force stays.
func reloadAccess(ctx context.Context, log *slog.Logger, srv *daemon.Server, path string, now *atomic.Pointer[access.File]) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		f, err := access.Load(path)
		if err != nil {
			log.Error("access file not reloaded: the previous one stays in force", "err", err)
			continue
		}
		now.Store(f)
		if err := srv.SetAccess(f); err != nil {
			log.Error("access file reloaded, socket not updated", "err", err)
			continue
		}
		log.Info("access file reloaded", "path", path, "tenants", len(f.Tenants))
	}
}

// parseFlags: -h prints the usage on stdout and succeeds, --version the build and the kernel's
// features; a bad flag is one line (the flag package would print it, the whole usage, and
// exit). done says bermd ends here, with code.
func parseFlags(showVersion *bool) (code int, done bool) {
	fs := flag.CommandLine
	fs.Init("bermd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	err := fs.Parse(os.Args[1:])
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Print("usage: bermd [flags]\n\nberm's node agent: keeps the eBPF programs loaded, runs berm run's calls (its socket), exports metrics.\n\nflags:\n")
		fs.SetOutput(os.Stdout)
		fs.PrintDefaults()
		return 0, true
	case err != nil:
		fmt.Fprintf(os.Stderr, "bermd: %v (bermd -h lists the flags)\n", err)
		return 2, true
	case fs.NArg() > 0:
		fmt.Fprintf(os.Stderr, "bermd: unexpected arguments %q (bermd -h lists the flags)\n", fs.Args())
		return 2, true
	case *showVersion:
		version.Write(os.Stdout, "bermd", sandboxer.ProbeKernel())
		return 0, true
	}
	return 0, false
}

type multi []string

func (m *multi) String() string     { return fmt.Sprint(*m) }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

type options struct {
	stateDir, socket, metrics, dsn, init string
	cluster                              string // --clickhouse-cluster
	rules                                []string
	noRules                              bool
	warm                                 int
	idleExit                             time.Duration
	pprof                                bool

	approvalsDir, approvalsToken, webhookURL, webhookSecret, approvers string
	dnsUpstream                                                        string
	injectCA                                                           string // --inject-upstream-ca
	access                                                             string
	node                                                               string // --node
	readerStall                                                        time.Duration
}

func run(log *slog.Logger, o options) error {
	if os.Geteuid() != 0 {
		return errors.New("bermd needs root (eBPF, cgroups)")
	}
	initPath, err := sandboxInit(o.init)
	if err != nil {
		return err
	}
	if o.warm < 0 {
		return fmt.Errorf("--warm: expected 0 or more sandboxes per tenant, got %d", o.warm)
	}
	if o.dnsUpstream != "" {
		if err := dnsguard.CheckUpstream(o.dnsUpstream); err != nil {
			return fmt.Errorf("--dns-upstream: %w", err)
		}
	}
	if o.readerStall <= 0 {
		return fmt.Errorf("--reader-stall: expected a positive duration, got %s", o.readerStall)
	}
	if o.idleExit < 0 {
		return fmt.Errorf("--idle-exit: expected a duration of 0 (never) or more, got %s", o.idleExit)
	}
	if o.node == "" {
		if o.node, err = os.Hostname(); err != nil {
			return fmt.Errorf("no --node and the host has no name: %w", err)
		}
	}
	acc := access.RootOnly
	if o.access != "" {
		if acc, err = access.Load(o.access); err != nil {
			return fmt.Errorf("--access: %w", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	report := sandboxer.ProbeKernel()
	log.Info("kernel probed", "kernel", report.Kernel, "layers", report.Layers, "refused", report.Missing)

	reg := agent.NewRegistry()
	ev, err := startRules(ctx, log, reg, o.rules, o.noRules)
	if err != nil {
		return err
	}
	roots, err := agent.LoadInjectRoots(o.injectCA)
	if err != nil {
		return fmt.Errorf("--inject-upstream-ca: %w", err)
	}
	a, err := sandboxer.NewAgent(agent.Config{StateDir: o.stateDir, Registry: reg, Logger: log, Rules: ev, DNS: dnsguard.Config{Upstream: o.dnsUpstream}, InjectRoots: roots})
	if err != nil {
		return err
	}
	defer a.Close()

	// Metrics are up before the socket: a caller that sees the socket can read them.
	if o.metrics != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		if o.pprof {
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		}
		ln, err := net.Listen("tcp", o.metrics)
		if err != nil {
			return fmt.Errorf("metrics on %s: %w", o.metrics, err)
		}
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server", "err", err)
			}
		}()
		defer hs.Close()
	}
	// Calls whose launcher died (a bermd killed with SIGKILL) left their cgroups behind.
	if stale, err := cgroup.ReapStale(); err != nil {
		log.Warn("stale calls", "err", err)
	} else if len(stale) > 0 {
		log.Info("reaped stale calls", "calls", stale)
	}
	pool, err := sandboxer.NewPool(initPath, o.warm, log, "default")
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := pool.SetBounds(*warmMaxTenant, *warmMax); err != nil {
		return err
	}
	registerPoolMetrics(reg, pool)
	// The decide right: with an access file, a decision over the approval API by anyone but
	// root needs it in the call's tenant (on top of being one of the rule's approvers).
	var accessNow atomic.Pointer[access.File]
	accessNow.Store(acc)
	var decide func(int, string) error
	if o.access != "" {
		decide = func(uid int, tenant string) error {
			if uid < 0 {
				return fmt.Errorf("access: the decision's maker is unknown: decisions of tenant %q need the decide right", tenant)
			}
			return accessNow.Load().Check(access.PeerOf(uint32(uid)), tenant, access.Decide)
		}
	}
	approvals, stopApprovals, err := startApprovals(log, reg, o, decide, a.Secrets())
	if err != nil {
		return err
	}
	defer stopApprovals()
	// Before the socket: the alerts of the first call are routed too.
	if err := startAlertWebhook(ctx, log, reg, o.stateDir, o.node); err != nil {
		return err
	}
	stopOTLP, err := startOTLP(ctx, log, reg, o.stateDir, o.node)
	if err != nil {
		return err
	}
	defer stopOTLP()
	svc := &sandboxer.Service{Agent: a, Pool: pool, Init: initPath, Approvals: approvals, Node: o.node}
	phases := daemon.NewPhaseMetrics(reg)
	srv := &daemon.Server{Service: svc, Log: log, IdleExit: o.idleExit, Served: func(sv daemon.Served) {
		phases.Observe(sv)
		logServed(log, sv)
	}, Trail: audit.Journal{Dir: filepath.Join(o.stateDir, "journal")}, Approvals: approvals, ReaderStall: o.readerStall}
	_ = srv.SetAccess(acc)
	if err := srv.Listen(o.socket); err != nil {
		return err
	}
	if o.access != "" {
		go reloadAccess(ctx, log, srv, o.access, &accessNow)
	}
	go func() {
		if err := srv.Serve(); err != nil {
			log.Error("control socket", "err", err)
			stop()
		}
	}()
	defer srv.Close()

	if err := startCollector(ctx, log, reg, o.stateDir, o.dsn, o.cluster); err != nil {
		return err
	}
	log.Info("bermd ready", "socket", o.socket, "metrics", o.metrics, "state_dir", o.stateDir, "node", o.node, "idle_exit", o.idleExit)
	select {
	case <-ctx.Done():
		log.Info("bermd stopping")
	case <-srv.Idle():
		// Started on demand: no call for the idle time. The socket goes first, so the next
		// `berm run` starts a new bermd rather than reach one that is leaving.
		log.Info("bermd idle, exiting", "idle_exit", o.idleExit)
		srv.Drain()
	}
	return nil
}
