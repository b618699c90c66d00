// Package clickhouse runs a real clickhouse-server for tests: on 127.0.0.1, on free ports, with
// a throwaway data directory. It installs Debian's clickhouse-server when it is missing (root
// only). Servers can be stopped, killed with SIGKILL and restarted on the same data and ports,
// which is what the collector's delivery tests need.
package clickhouse

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/bermsec/berm/testenv/testutil"
)

// Shard is one member of a test cluster, as written into remote_servers.
type Shard struct {
	Host string
	Port int
}

// Config says how to start a server. Zero values are fine.
type Config struct {
	Dir string // data, logs and config; a new temp dir when empty
	// Clusters are written into remote_servers: name -> shards (one replica each).
	Clusters map[string][]Shard
	// TCPPort and HTTPPort are chosen free when zero.
	TCPPort  int
	HTTPPort int
}

// Server is a running (or stopped) clickhouse-server.
type Server struct {
	Dir      string
	TCPPort  int
	HTTPPort int

	cfg    Config
	binary string

	mu   sync.Mutex
	proc *testutil.Proc // nil when stopped
}

// Addr is host:port of the native protocol.
func (s *Server) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.TCPPort) }

// DSN is a clickhouse:// DSN for database db ("default" when empty).
func (s *Server) DSN(db string) string {
	if db == "" {
		db = "default"
	}
	return fmt.Sprintf("clickhouse://%s/%s", s.Addr(), db)
}

// Binary finds clickhouse-server, installing Debian's package when it is missing and we are
// root.
func Binary() (string, error) {
	if p, err := lookup(); err == nil {
		return p, nil
	}
	if os.Geteuid() != 0 {
		return "", errors.New("clickhouse-server is not installed and installing it needs root (apt-get install clickhouse-server)")
	}
	if err := aptInstall(); err != nil {
		return "", err
	}
	return lookup()
}

func lookup() (string, error) {
	for _, name := range []string{"clickhouse-server", "/usr/sbin/clickhouse-server", "/usr/bin/clickhouse-server"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("clickhouse-server not found")
}

var installMu sync.Mutex

func aptInstall() error {
	installMu.Lock()
	defer installMu.Unlock()
	if _, err := lookup(); err == nil {
		return nil
	}
	install := func() ([]byte, error) {
		cmd := exec.Command("apt-get", "install", "-y", "--no-install-recommends", "clickhouse-server", "clickhouse-client")
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		return cmd.CombinedOutput()
	}
	if _, err := install(); err == nil {
		return nil
	}
	if out, err := exec.Command("apt-get", "update").CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get update: %w: %s", err, tail(out))
	}
	if out, err := install(); err != nil {
		return fmt.Errorf("apt-get install clickhouse-server: %w: %s", err, tail(out))
	}
	return nil
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago. It is drawn below the
// kernel's ephemeral range (32768 and up by default), where every ":0" listener and every
// outgoing connection of the tests running in parallel takes its ports: a port handed out
// there could be taken again before the server binds it.
func FreePort() (int, error) {
	for i := 0; i < 100; i++ {
		p := 20000 + rand.IntN(12000)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		l.Close()
		return p, nil
	}
	return 0, errors.New("find free port: none free in 20000-31999 after 100 tries")
}

// Prepare writes the configuration of a server without starting it (ports are fixed here, so
// that shards can name each other before any of them runs).
func Prepare(cfg Config) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "berm-clickhouse-")
		if err != nil {
			return nil, fmt.Errorf("create clickhouse dir: %w", err)
		}
		cfg.Dir = d
	}
	for _, p := range []*int{&cfg.TCPPort, &cfg.HTTPPort} {
		if *p == 0 {
			if *p, err = FreePort(); err != nil {
				return nil, err
			}
		}
	}
	s := &Server{Dir: cfg.Dir, TCPPort: cfg.TCPPort, HTTPPort: cfg.HTTPPort, cfg: cfg, binary: bin}
	if err := s.writeConfig(); err != nil {
		return nil, err
	}
	return s, nil
}

// Start prepares and starts a server and waits until it answers.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	s, err := Prepare(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// ForTest starts a server for t and stops it (removing its data) when t ends. When the server
// cannot be started the test fails, except when not running as root, where it is skipped with
// the reason (tests that need the real server must not pass silently in CI, which runs as root).
func ForTest(t testing.TB, cfg Config) *Server {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	// root can install the server (Binary does), so only a test that is not root may skip
	return testutil.ServerForTest(t, "a real clickhouse-server", 60*time.Second,
		func(ctx context.Context) (*Server, error) { return Start(ctx, cfg) }, (*Server).Stop)
}

var configTmpl = template.Must(template.New("config").Parse(`<?xml version="1.0"?>
<yandex>
    <logger>
        <level>warning</level>
        <log>{{.Dir}}/log/clickhouse-server.log</log>
        <errorlog>{{.Dir}}/log/clickhouse-server.err.log</errorlog>
        <size>100M</size>
        <count>1</count>
    </logger>
    <listen_host>127.0.0.1</listen_host>
    <tcp_port>{{.TCPPort}}</tcp_port>
    <http_port>{{.HTTPPort}}</http_port>
    <path>{{.Dir}}/data/</path>
    <tmp_path>{{.Dir}}/tmp/</tmp_path>
    <user_files_path>{{.Dir}}/user_files/</user_files_path>
    <format_schema_path>{{.Dir}}/format_schemas/</format_schema_path>
    <users_config>{{.Dir}}/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <max_connections>256</max_connections>
    <max_concurrent_queries>100</max_concurrent_queries>
    <mark_cache_size>268435456</mark_cache_size>
    <uncompressed_cache_size>268435456</uncompressed_cache_size>
    <timezone>UTC</timezone>
    <remote_servers>
{{- range $name, $shards := .Clusters}}
        <{{$name}}>
{{- range $shards}}
            <shard>
                <replica>
                    <host>{{.Host}}</host>
                    <port>{{.Port}}</port>
                </replica>
            </shard>
{{- end}}
        </{{$name}}>
{{- end}}
    </remote_servers>
</yandex>
`))

const usersXML = `<?xml version="1.0"?>
<yandex>
    <profiles>
        <default>
            <max_memory_usage>4000000000</max_memory_usage>
            <load_balancing>random</load_balancing>
        </default>
    </profiles>
    <users>
        <default>
            <password></password>
            <networks>
                <ip>127.0.0.1</ip>
                <ip>::1</ip>
            </networks>
            <profile>default</profile>
            <quota>default</quota>
        </default>
    </users>
    <quotas>
        <default>
            <interval>
                <duration>3600</duration>
                <queries>0</queries>
                <errors>0</errors>
                <result_rows>0</result_rows>
                <read_rows>0</read_rows>
                <execution_time>0</execution_time>
            </interval>
        </default>
    </quotas>
</yandex>
`

func (s *Server) writeConfig() error {
	for _, d := range []string{"log", "data", "tmp", "user_files", "format_schemas"} {
		if err := os.MkdirAll(filepath.Join(s.Dir, d), 0o755); err != nil {
			return fmt.Errorf("create clickhouse dir: %w", err)
		}
	}
	var b bytes.Buffer
	if err := configTmpl.Execute(&b, struct {
		Config
		Dir string
	}{s.cfg, s.Dir}); err != nil {
		return fmt.Errorf("render clickhouse config: %w", err)
	}
	if err := os.WriteFile(s.configPath(), b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write clickhouse config: %w", err)
	}
	if err := os.WriteFile(filepath.Join(s.Dir, "users.xml"), []byte(usersXML), 0o644); err != nil {
		return fmt.Errorf("write clickhouse users: %w", err)
	}
	return nil
}

func (s *Server) configPath() string { return filepath.Join(s.Dir, "config.xml") }

// Start starts the (stopped) server on its data and ports and waits until it answers.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.proc != nil {
		s.mu.Unlock()
		return errors.New("clickhouse-server already running")
	}
	cmd := exec.Command(s.binary, "--config-file="+s.configPath())
	cmd.Dir = s.Dir
	proc, err := testutil.StartProc(cmd, filepath.Join(s.Dir, "log", "stdout.log"))
	if err != nil {
		s.mu.Unlock()
		return err
	}
	s.proc = proc
	s.mu.Unlock()
	url := fmt.Sprintf("http://127.0.0.1:%d/ping", s.HTTPPort)
	client := &http.Client{Timeout: time.Second}
	ready := func() bool {
		resp, err := client.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false
		}
		// The HTTP and native listeners come up together; check the one we use.
		c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	}
	if err := proc.WaitReady(ctx, "clickhouse-server on "+s.Addr(), 50*time.Millisecond, ready, s.logTail); err != nil {
		s.Kill()
		return err
	}
	return nil
}

func (s *Server) logTail() string {
	return testutil.LogTail(filepath.Join(s.Dir, "log", "clickhouse-server.err.log"), filepath.Join(s.Dir, "log", "stdout.log"))
}

// Running says whether the server process is alive.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil
}

// Kill sends SIGKILL and waits for the process to go.
func (s *Server) Kill() { s.signal(syscall.SIGKILL, 0) }

// Stop shuts the server down (SIGTERM, then SIGKILL after 10 s) and leaves its data.
func (s *Server) Stop() { s.signal(syscall.SIGTERM, 10*time.Second) }

func (s *Server) signal(sig syscall.Signal, grace time.Duration) {
	s.mu.Lock()
	proc := s.proc
	s.proc = nil
	s.mu.Unlock()
	if proc != nil {
		proc.Stop(sig, grace)
	}
}

// Restart starts a stopped or killed server again on the same data and ports.
func (s *Server) Restart(ctx context.Context) error {
	s.Stop()
	return s.Start(ctx)
}
