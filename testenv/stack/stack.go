package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	chtest "github.com/bermsec/berm/testenv/clickhouse"
	"github.com/bermsec/berm/testenv/grafana"
	"github.com/bermsec/berm/testenv/prometheus"
	"github.com/bermsec/berm/testenv/testutil"
)

// Config says where the stack's binaries are and where it keeps its state.
type Config struct {
	Bin     string // bermd, berm-collector, berm-init and grafana/ (make build's bin/)
	Dir     string // the stack's state: ClickHouse's data, bermd's journal, logs, stack.json
	Grafana bool   // start Grafana too (the test may leave it out)
	// NoFrontend starts Grafana without its web UI (the API and the datasource only): a test
	// that reads panels through /api/ds/query needs no frontend, whose first build takes long.
	NoFrontend bool
	Node       string // bermd's --node
}

// Info is what a running stack tells its user, kept in Dir/stack.json while it runs.
type Info struct {
	PID         int    `json:"pid"` // the process that owns the stack (make stack's)
	ClickHouse  string `json:"clickhouse"`
	ClickHTTP   string `json:"clickhouse_http"`
	Socket      string `json:"socket"`
	BermdMetric string `json:"bermd_metrics"`
	Collector   string `json:"collector_metrics"`
	StateDir    string `json:"state_dir"`
	Grafana     string `json:"grafana,omitempty"`
	GrafanaUser string `json:"grafana_user,omitempty"`
	GrafanaPass string `json:"grafana_password,omitempty"`
	Prometheus  string `json:"prometheus,omitempty"`
	Logs        string `json:"logs"`
}

// Stack is the running servers, stopped by Down in the reverse order of their start.
type Stack struct {
	Info  Info
	stops []func()
}

func infoPath(dir string) string { return filepath.Join(dir, "stack.json") }

// Running reads Dir/stack.json and says whether the process that wrote it is still alive.
func Running(dir string) (*Info, bool) {
	b, err := os.ReadFile(infoPath(dir))
	if err != nil {
		return nil, false
	}
	var in Info
	if json.Unmarshal(b, &in) != nil || in.PID <= 0 {
		return nil, false
	}
	if err := syscall.Kill(in.PID, 0); err != nil {
		return nil, false
	}
	// a pid reused by another program is not the stack
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", in.PID))
	if err != nil {
		return nil, false
	}
	switch filepath.Base(exe) {
	case "berm-stack", "stack", "stack.test":
		return &in, true
	}
	return nil, false
}

// Up starts ClickHouse, berm-collector, bermd, Prometheus (when installed) and Grafana (with
// cfg.Grafana), each on loopback and a free port, and writes Dir/stack.json. On a failure what
// was started is stopped.
func Up(ctx context.Context, cfg Config) (_ *Stack, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the stack runs bermd, which needs root (eBPF, cgroups): run make stack as root")
	}
	bin, err := filepath.Abs(cfg.Bin)
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"bermd", "berm-collector", "berm-init"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			return nil, fmt.Errorf("%s/%s: %w (make build first)", bin, name, err)
		}
	}
	logs := filepath.Join(dir, "logs")
	state := filepath.Join(dir, "state")
	for _, d := range []string{logs, state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	s := &Stack{Info: Info{PID: os.Getpid(), StateDir: state, Logs: logs, Socket: filepath.Join(dir, "bermd.sock")}}
	defer func() {
		if err != nil {
			s.Down()
		}
	}()

	ch, err := chtest.Start(ctx, chtest.Config{Dir: filepath.Join(dir, "clickhouse")})
	if err != nil {
		return nil, fmt.Errorf("clickhouse: %w", err)
	}
	s.stops = append(s.stops, ch.Stop)
	dsn := ch.DSN("berm")
	s.Info.ClickHouse, s.Info.ClickHTTP = dsn, fmt.Sprintf("http://127.0.0.1:%d", ch.HTTPPort)

	// the schema first: the collector and Grafana's datasource both want the tables
	mctx, cancel := context.WithTimeout(ctx, time.Minute)
	out, merr := exec.CommandContext(mctx, filepath.Join(bin, "berm-collector"), "--clickhouse", dsn, "--migrate").CombinedOutput()
	cancel()
	if merr != nil {
		return nil, fmt.Errorf("berm-collector --migrate: %w: %s", merr, out)
	}

	port := func() (string, error) {
		p, err := chtest.FreePort()
		return fmt.Sprintf("127.0.0.1:%d", p), err
	}
	if s.Info.BermdMetric, err = port(); err != nil {
		return nil, err
	}
	_ = os.Remove(s.Info.Socket) // a stack killed with SIGKILL left it
	node := cfg.Node
	if node == "" {
		node = "berm-stack"
	}
	bermd, err := start(filepath.Join(logs, "bermd.log"), filepath.Join(bin, "bermd"), "--state-dir", state, "--socket", s.Info.Socket,
		"--metrics", s.Info.BermdMetric, "--node", node, "--approvals-dir", filepath.Join(dir, "approvals"), "--approvals-token", filepath.Join(dir, "approvals.token"))
	if err != nil {
		return nil, err
	}
	s.stops = append(s.stops, func() { bermd.Stop(syscall.SIGTERM, 30*time.Second) })
	if err := bermd.WaitReady(ctx, "bermd", 50*time.Millisecond, func() bool { _, err := os.Stat(s.Info.Socket); return err == nil },
		func() string { return testutil.LogTail(filepath.Join(logs, "bermd.log")) }); err != nil {
		return nil, err
	}

	if s.Info.Collector, err = port(); err != nil {
		return nil, err
	}
	coll, err := start(filepath.Join(logs, "berm-collector.log"), filepath.Join(bin, "berm-collector"), "--state-dir", state, "--clickhouse", dsn,
		"--metrics-addr", s.Info.Collector)
	if err != nil {
		return nil, err
	}
	s.stops = append(s.stops, func() { coll.Stop(syscall.SIGTERM, 30*time.Second) })
	if err := coll.WaitReady(ctx, "berm-collector", 50*time.Millisecond, func() bool { return get("http://"+s.Info.Collector+"/metrics") == nil },
		func() string { return testutil.LogTail(filepath.Join(logs, "berm-collector.log")) }); err != nil {
		return nil, err
	}

	var promURL string
	if _, perr := exec.LookPath("prometheus"); perr == nil {
		prom, err := prometheus.Start(ctx, prometheus.Config{Dir: mkdir(filepath.Join(dir, "prometheus")), Targets: []string{s.Info.BermdMetric, s.Info.Collector}, ScrapeInterval: 5 * time.Second})
		if err != nil {
			return nil, fmt.Errorf("prometheus: %w", err)
		}
		s.stops = append(s.stops, prom.Stop)
		promURL = prom.URL()
		s.Info.Prometheus = promURL
	}

	if cfg.Grafana {
		g, err := startGrafana(ctx, bin, dir, dsn, promURL, !cfg.NoFrontend)
		if err != nil {
			return nil, fmt.Errorf("grafana: %w", err)
		}
		s.stops = append(s.stops, g.Stop)
		s.Info.Grafana, s.Info.GrafanaUser, s.Info.GrafanaPass = g.URL(), g.User, g.Password
	}
	b, _ := json.MarshalIndent(s.Info, "", "  ")
	if err := os.WriteFile(infoPath(dir), b, 0o600); err != nil {
		return nil, err
	}
	s.stops = append(s.stops, func() { os.Remove(infoPath(dir)) })
	return s, nil
}

// startGrafana provisions make build's plugin and dashboards (bin/grafana), berm's datasource on
// the stack's ClickHouse and, with Prometheus, a Prometheus datasource for the daemon panels.
func startGrafana(ctx context.Context, bin, dir, dsn, promURL string, frontend bool) (*grafana.Server, error) {
	gbin := filepath.Join(bin, "grafana")
	if _, err := os.Stat(filepath.Join(gbin, "berm-datasource", "plugin.json")); err != nil {
		return nil, fmt.Errorf("the plugin is not built (make build): %w", err)
	}
	// a provisioning directory of the stack's own: the shipped one, plus Prometheus
	prov := filepath.Join(dir, "grafana-provisioning")
	if err := os.RemoveAll(prov); err != nil {
		return nil, err
	}
	if err := os.CopyFS(prov, os.DirFS(filepath.Join(gbin, "provisioning"))); err != nil {
		return nil, fmt.Errorf("copy provisioning: %w", err)
	}
	if promURL != "" {
		ds := fmt.Sprintf("apiVersion: 1\ndatasources:\n  - name: Prometheus\n    type: prometheus\n    uid: prometheus\n    access: proxy\n    url: %s\n", promURL)
		if err := os.WriteFile(filepath.Join(prov, "datasources", "prometheus.yaml"), []byte(ds), 0o644); err != nil {
			return nil, err
		}
	}
	boards := filepath.Join(gbin, "dashboards")
	uids, err := dashboardUIDs(boards)
	if err != nil {
		return nil, err
	}
	return grafana.Start(ctx, grafana.Config{
		Dir: filepath.Join(dir, "grafana"), PluginsDir: gbin, Provisioning: prov, Unsigned: []string{"berm-datasource"},
		Dashboards: uids, Env: []string{"BERM_CLICKHOUSE_DSN=" + dsn, "BERM_DASHBOARDS_DIR=" + boards},
		Frontend: frontend, // the web UI: built by make grafana, cached (testenv/grafana.Frontend)
	})
}

func dashboardUIDs(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no dashboards in %s (make build)", dir)
	}
	var uids []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var d struct {
			UID string `json:"uid"`
		}
		if err := json.Unmarshal(b, &d); err != nil {
			return nil, fmt.Errorf("dashboard %s: %w", f, err)
		}
		uids = append(uids, d.UID)
	}
	return uids, nil
}

func start(log, path string, args ...string) (*testutil.Proc, error) {
	cmd := exec.Command(path, args...)
	cmd.Dir = filepath.Dir(log)
	return testutil.StartProc(cmd, log)
}

func get(url string) error {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

// Down stops what Up started, the last started first.
func (s *Stack) Down() {
	for i := len(s.stops) - 1; i >= 0; i-- {
		s.stops[i]()
	}
	s.stops = nil
}

// mkdir makes dir (a harness that wants it there) and gives it back; a failure is the
// harness's to report when it writes there.
func mkdir(dir string) string {
	_ = os.MkdirAll(dir, 0o755)
	return dir
}
