package dashboards

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/ClickHouse/clickhouse-go/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/collector"
	"github.com/bermsec/berm/testenv/bermbin"
	chtest "github.com/bermsec/berm/testenv/clickhouse"
)

// realCall is a tool call the fixture runs with berm run, and what it is for.
type realCall struct {
	name, tenant, tool string
	args               []string // berm run flags before --
	argv               []string
}

// hostileName is a file name a tool inside the sandbox plants: SQL and Grafana template
// syntax, quotes, a backslash and a newline, all of which must reach the panels as text.
const hostileName = "x' OR 1=1 -- \\ ${tenant} $__all\nline2"

var fixtureCalls = []realCall{
	{"benign", "acme", "shell", nil, []string{"/bin/sh", "-c", "echo hello; cat /etc/hostname >/dev/null"}},
	// the built-in policy refuses writes outside the workspace and /tmp (Landlock)
	{"denial", "acme", "writer", nil, []string{"/bin/sh", "-c", "echo x > /etc/berm-dashboards-denied; echo y > /usr/berm-denied; true"}},
	// new namespaces inside the call: the escape-unshare rule's alert, an escape syscall
	{"alert", "acme", "escaper", nil, []string{"/usr/bin/unshare", "--user", "--map-root-user", "/bin/true"}},
	// the wall-time cap ends it
	{"limit", "acme", "sleeper", []string{"--timeout", "1s"}, []string{"/bin/sleep", "30"}},
	// a neighbour tenant's call, with a planted file name and a refused connection
	{"neighbour", "evil", "planter", nil, []string{"/bin/bash", "-c", "touch \"/tmp/$BERM_NAME\"; cat \"/tmp/$BERM_NAME\"; exec 3<>/dev/tcp/203.0.113.7/443 || true"}},
}

type fixture struct {
	dsn    string
	server *chtest.Server
	keys   map[string]string // call name -> call key
	recs   map[string]event.CallRecord
	start  time.Time
}

// newFixture starts a real ClickHouse, runs the fixture's calls with berm run (real sandbox,
// eBPF, rules) and ships their journal with the collector.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	bermbin.RequireRoot(t)
	s := chtest.ForTest(t, chtest.Config{})
	dsn := s.DSN("berm")
	bin := bermbin.Path(t, "berm")
	state := t.TempDir()
	f := &fixture{dsn: dsn, server: s, keys: map[string]string{}, recs: map[string]event.CallRecord{}, start: time.Now().Add(-time.Minute)}
	for _, c := range fixtureCalls {
		summary := filepath.Join(t.TempDir(), "summary.json")
		args := append([]string{"run", "--daemon", "never", "--state-dir", state, "--tenant", c.tenant, "--tool", c.tool,
			"--call-id", c.name, "--summary", summary, "--env", "BERM_NAME=" + hostileName}, c.args...)
		cmd := exec.Command(bin, append(append(args, "--"), c.argv...)...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if err != nil && (!errors.As(err, &exit) || exit.ExitCode() >= 125 && c.name != "limit") {
			t.Fatalf("berm run %s: %v\n%s", c.name, err, out)
		}
		rec, err := os.ReadFile(summary)
		if err != nil {
			t.Fatalf("call %s: no summary: %v\n%s", c.name, err, out)
		}
		f.keys[c.name] = jsonField(t, rec, "call_key")
		var r event.CallRecord
		if err := json.Unmarshal(rec, &r); err != nil {
			t.Fatal(err)
		}
		f.recs[c.name] = r
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{s.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.Exec(ctx, "CREATE DATABASE IF NOT EXISTS berm"); err != nil {
		t.Fatalf("create database: %v", err)
	}
	c, err := collector.New(collector.Config{StateDir: state, DSN: dsn, BatchInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.RunOnce(ctx); err != nil {
		t.Fatalf("ship the journal: %v", err)
	}
	return f
}

func jsonField(t *testing.T, b []byte, name string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("call summary: %v", err)
	}
	v, _ := m[name].(string)
	if v == "" {
		t.Fatalf("no %s in %s", name, b)
	}
	return v
}
