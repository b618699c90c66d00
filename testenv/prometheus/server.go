// Package prometheus runs a real Prometheus server for tests (Debian's prometheus package): on
// 127.0.0.1 and a free port, with its own configuration and storage directory, scraping the
// targets a test gives it every second.
package prometheus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	chtest "github.com/bermsec/berm/testenv/clickhouse"
	"github.com/bermsec/berm/testenv/testutil"
)

// Config says how to start a server.
type Config struct {
	Dir     string   // configuration, storage and log; a new temp dir when empty
	Targets []string // host:port of each /metrics to scrape (job "berm")
	// ScrapeInterval is how often each target is scraped (1 s when zero).
	ScrapeInterval time.Duration
}

// Server is a running Prometheus.
type Server struct {
	Dir  string
	Port int

	proc *testutil.Proc
	once sync.Once
}

// URL is the server's base URL, what a Grafana datasource points at.
func (s *Server) URL() string { return fmt.Sprintf("http://127.0.0.1:%d", s.Port) }

// Binary finds prometheus, installing Debian's package when it is missing and we are root.
func Binary() (string, error) {
	if p, err := exec.LookPath("prometheus"); err == nil {
		return p, nil
	}
	if os.Geteuid() != 0 {
		return "", errors.New("prometheus is not installed and installing it needs root (apt-get install prometheus)")
	}
	cmd := exec.Command("apt-get", "install", "-y", "--no-install-recommends", "prometheus")
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("apt-get install prometheus: %w: %s", err, out)
	}
	return exec.LookPath("prometheus")
}

const configYAML = `global:
  scrape_interval: %s
  scrape_timeout: %s
  evaluation_interval: %s
scrape_configs:
  - job_name: berm
    static_configs:
      - targets: [%s]
`

// Start starts a server and waits until it is ready.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	if cfg.Dir == "" {
		if cfg.Dir, err = os.MkdirTemp("", "berm-prometheus-"); err != nil {
			return nil, err
		}
	}
	if cfg.ScrapeInterval == 0 {
		cfg.ScrapeInterval = time.Second
	}
	port, err := chtest.FreePort()
	if err != nil {
		return nil, err
	}
	var targets []string
	for _, t := range cfg.Targets {
		targets = append(targets, fmt.Sprintf("%q", t))
	}
	iv := cfg.ScrapeInterval.String()
	conf := filepath.Join(cfg.Dir, "prometheus.yml")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(configYAML, iv, iv, iv, strings.Join(targets, ", "))), 0o644); err != nil {
		return nil, fmt.Errorf("write prometheus config: %w", err)
	}
	s := &Server{Dir: cfg.Dir, Port: port}
	cmd := exec.Command(bin, "--config.file="+conf, "--storage.tsdb.path="+filepath.Join(cfg.Dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port), "--log.level=warn")
	cmd.Dir = cfg.Dir
	if s.proc, err = testutil.StartProc(cmd, filepath.Join(cfg.Dir, "prometheus.log")); err != nil {
		return nil, err
	}
	client := &http.Client{Timeout: time.Second}
	ready := func() bool {
		resp, err := client.Get(s.URL() + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	if err := s.proc.WaitReady(ctx, "prometheus", 100*time.Millisecond, ready, s.LogTail); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// ForTest starts a server for t and stops it when t ends. It fails the test when Prometheus
// cannot be installed or started, unless the test is not root, where it skips with the reason
// (CI runs as root).
func ForTest(t testing.TB, cfg Config) *Server {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	return testutil.ServerForTest(t, "a real Prometheus server", 2*time.Minute,
		func(ctx context.Context) (*Server, error) { return Start(ctx, cfg) }, (*Server).Stop)
}

// LogTail is the end of the server's log, for error messages.
func (s *Server) LogTail() string { return testutil.LogTail(filepath.Join(s.Dir, "prometheus.log")) }

// Stop stops the server (SIGTERM, SIGKILL after 10 s).
func (s *Server) Stop() {
	s.once.Do(func() { s.proc.Stop(syscall.SIGTERM, 10*time.Second) })
}

// Sample is one series of an instant query's answer.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Query runs an instant PromQL query now.
func (s *Server) Query(expr string) ([]Sample, error) {
	resp, err := http.Get(s.URL() + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("query %s: %w: %s", expr, err, b)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", expr, r.Error)
	}
	var out []Sample
	for _, x := range r.Data.Result {
		var v float64
		str, _ := x.Value[1].(string)
		fmt.Sscan(str, &v)
		out = append(out, Sample{x.Metric, v})
	}
	return out, nil
}

// Wait polls an instant query until cond holds for its answer, or the timeout passes.
func (s *Server) Wait(expr string, timeout time.Duration, cond func([]Sample) bool) ([]Sample, error) {
	deadline := time.Now().Add(timeout)
	for {
		got, err := s.Query(expr)
		if err == nil && cond(got) {
			return got, nil
		}
		if time.Now().After(deadline) {
			return got, fmt.Errorf("%s: %v (%v) after %v", expr, got, err, timeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
