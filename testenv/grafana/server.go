// Package grafana runs a real Grafana server for tests, built from Grafana's Go module (see
// Home), on 127.0.0.1 and a free port, with a throwaway data directory, the plugins and
// provisioning a test gives it.
package grafana

import (
	"bytes"
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
	Dir          string   // data, logs and config; a new temp dir when empty
	PluginsDir   string   // Grafana's plugins directory
	Provisioning string   // Grafana's provisioning directory (datasources/, dashboards/)
	Unsigned     []string // plugin ids allowed to load unsigned
	Env          []string // NAME=VALUE for the server: what the provisioning files expand
	// Dashboards are the uids of the provisioned dashboards Start waits for: Grafana provisions
	// dashboards in a background service after it answers /api/health.
	Dashboards []string
	// Frontend serves Grafana's web frontend (built once per source version, see Frontend), so
	// that a browser can open the dashboards; without it only the HTTP API answers.
	Frontend bool
}

// Server is a running Grafana.
type Server struct {
	Dir      string
	Port     int
	User     string
	Password string

	proc *testutil.Proc
	once sync.Once
}

// URL is the server's base URL.
func (s *Server) URL() string { return fmt.Sprintf("http://127.0.0.1:%d", s.Port) }

const customINI = `[server]
http_addr = 127.0.0.1
http_port = %d
%s
[paths]
data = %s
logs = %s
plugins = %s
provisioning = %s
[security]
admin_user = admin
admin_password = %s
[plugins]
allow_loading_unsigned_plugins = %s
[analytics]
reporting_enabled = false
check_for_updates = false
check_for_plugin_updates = false
[log]
mode = file
level = info
[news]
news_feed_enabled = false
`

// Start builds Grafana if needed, starts it and waits for /api/health.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	home, err := Home(ctx)
	if err != nil {
		return nil, err
	}
	public := ""
	if cfg.Frontend {
		if public, err = Frontend(ctx); err != nil {
			return nil, err
		}
	}
	if cfg.Dir == "" {
		if cfg.Dir, err = os.MkdirTemp("", "berm-grafana-"); err != nil {
			return nil, err
		}
	}
	for attempt := 1; ; attempt++ {
		s, err := start(ctx, cfg, home, public)
		// The Grafana built here (commit 81d85ce8) sometimes fails its first start on a new
		// database: it creates the default org after the admin's insert made it (UNIQUE
		// constraint failed: org.id; upstream grafana/grafana#77252, #68644). A new database
		// starts cleanly; any other failure is the test's.
		if err != nil && attempt < 3 && strings.Contains(err.Error(), "failed to create default organization") {
			if rerr := os.RemoveAll(filepath.Join(cfg.Dir, "data")); rerr != nil {
				return nil, errors.Join(err, rerr)
			}
			continue
		}
		return s, err
	}
}

func start(ctx context.Context, cfg Config, home, public string) (*Server, error) {
	port, err := chtest.FreePort()
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: cfg.Dir, Port: port, User: "admin", Password: fmt.Sprintf("berm-%d", time.Now().UnixNano())}
	for _, d := range []string{"data", "logs"} {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	ini := filepath.Join(cfg.Dir, "custom.ini")
	static := ""
	if public != "" {
		// Grafana reads public/views/index.html once, at start
		static = "static_root_path = " + public
	}
	text := fmt.Sprintf(customINI, port, static, filepath.Join(cfg.Dir, "data"), filepath.Join(cfg.Dir, "logs"),
		cfg.PluginsDir, cfg.Provisioning, s.Password, strings.Join(cfg.Unsigned, ","))
	if err := os.WriteFile(ini, []byte(text), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(home, "bin", "grafana"), "server", "--homepath", home, "--config", ini)
	cmd.Dir = cfg.Dir
	cmd.Env = append(os.Environ(), cfg.Env...)
	// its own process group: its plugins are its children
	if s.proc, err = testutil.StartProc(cmd, filepath.Join(cfg.Dir, "logs", "stdout.log")); err != nil {
		return nil, err
	}
	if err := s.waitHealthy(ctx, cfg.Dashboards); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// ForTest starts a server for t and stops it when t ends. It fails the test when Grafana cannot
// be built or started, unless the test is not root, where it skips with the reason (CI runs as
// root).
func ForTest(t testing.TB, cfg Config) *Server {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	// 40 minutes: the first use builds Grafana (and its frontend)
	return testutil.ServerForTest(t, "a real Grafana server", 40*time.Minute,
		func(ctx context.Context) (*Server, error) { return Start(ctx, cfg) }, (*Server).Stop)
}

func (s *Server) waitHealthy(ctx context.Context, dashboards []string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	return s.proc.WaitReady(ctx, "grafana", 200*time.Millisecond, func() bool {
		var h struct {
			Database string `json:"database"`
		}
		if s.Get("/api/health", &h) != nil || h.Database != "ok" {
			return false
		}
		// search, not /api/dashboards/uid/: a missing dashboard is an empty answer there, not
		// an error in Grafana's log (which the tests read)
		for _, uid := range dashboards {
			var found []struct {
				UID string `json:"uid"`
			}
			if s.Get("/api/search?type=dash-db&dashboardUIDs="+url.QueryEscape(uid), &found) != nil || len(found) == 0 {
				return false
			}
		}
		return true
	}, s.LogTail)
}

// LogTail is the end of Grafana's log, for error messages.
func (s *Server) LogTail() string {
	return testutil.LogTail(filepath.Join(s.Dir, "logs", "grafana.log"), filepath.Join(s.Dir, "logs", "stdout.log"))
}

// Stop stops the server (SIGTERM, SIGKILL after 10 s) and its plugins.
func (s *Server) Stop() {
	s.once.Do(func() {
		if s.proc != nil {
			s.proc.Stop(syscall.SIGTERM, 10*time.Second)
		}
	})
}

// Do sends a request as the admin and decodes a JSON answer into out (when not nil). A status
// other than 2xx is an error carrying the body.
func (s *Server) Do(method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.URL()+path, rd)
	if err != nil {
		return err
	}
	req.SetBasicAuth(s.User, s.Password)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return &StatusError{Code: resp.StatusCode, Body: string(b)}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decode %s: %w", method, path, b, err)
		}
	}
	return nil
}

// Get is Do with GET.
func (s *Server) Get(path string, out any) error { return s.Do(http.MethodGet, path, nil, out) }

// StatusError is an answer with a status other than 2xx.
type StatusError struct {
	Code int
	Body string
}

func (e *StatusError) Error() string { return fmt.Sprintf("status %d: %s", e.Code, e.Body) }
