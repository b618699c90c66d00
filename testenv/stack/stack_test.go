package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bermsec/berm/testenv/bermbin"
)

// The stack's entry point, for real: up, a real call through its bermd visible in its
// ClickHouse through its collector, up again says where the running one is, down stops
// every server and removes stack.json. (Grafana is left out here: dashboards/ tests it with
// the same provisioning.)
func TestTheStackComesUpShipsARealCallAndGoesDown(t *testing.T) {
	bermbin.RequireRoot(t)
	bin := filepath.Dir(bermbin.Path(t, "bermd"))
	bermbin.Path(t, "berm-init")
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := Up(ctx, Config{Bin: bin, Dir: dir, Node: "stacktest-node"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Down()

	// make stack again while it runs: it says where, it does not start a second one
	var out bytes.Buffer
	if err := run([]string{"up", "--bin", bin, "--dir", dir}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "already running") || !strings.Contains(out.String(), s.Info.ClickHouse) {
		t.Errorf("a second up did not name the running stack:\n%s", out.String())
	}

	r := bermbin.Berm(t, nil, "run", "--socket", s.Info.Socket, "--daemon", "required", "--call-id", "TestTheStack-1", "--tenant", "stacktest", "--tool", "demo", "--", "/bin/cat", "/etc/hostname")
	if r.Exit != 0 {
		t.Fatalf("a call through the stack's bermd: exit %d\n%s\n%s", r.Exit, r.Stderr, tail(filepath.Join(s.Info.Logs, "bermd.log")))
	}
	q := "SELECT node, end_reason FROM berm.calls WHERE tenant = 'stacktest' AND call_id = 'TestTheStack-1' FORMAT TabSeparated"
	var row string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		row = query(s.Info.ClickHTTP, q)
		if row != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the call is not in ClickHouse after a minute\ncollector log:\n%s", tail(filepath.Join(s.Info.Logs, "berm-collector.log")))
		}
	}
	if row != "stacktest-node\texit" {
		t.Errorf("the call's row in ClickHouse: %q, want node stacktest-node, end exit", row)
	}
	if s.Info.Prometheus != "" {
		if err := get(s.Info.Prometheus + "/-/ready"); err != nil {
			t.Errorf("prometheus: %v", err)
		}
	}

	s.Down()
	if _, err := os.Stat(filepath.Join(dir, "stack.json")); !os.IsNotExist(err) {
		t.Errorf("stack.json after down: %v", err)
	}
	if _, ok := Running(dir); ok {
		t.Error("the stack still says it runs after down")
	}
	for _, addr := range []string{s.Info.ClickHTTP + "/ping", "http://" + s.Info.BermdMetric + "/metrics", "http://" + s.Info.Collector + "/metrics"} {
		if err := get(addr); err == nil {
			t.Errorf("%s still answers after down", addr)
		}
	}
}

func query(base, q string) string {
	resp, err := http.Get(base + "/?query=" + url.QueryEscape(q))
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return fmt.Sprintf("%s", b)
}
