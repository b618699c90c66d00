package dashboards

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/collector"
	"github.com/bermsec/berm/collector/audit"
	"github.com/bermsec/berm/testenv/bermbin"
	chtest "github.com/bermsec/berm/testenv/clickhouse"
	"github.com/bermsec/berm/testenv/dnstest"
	"github.com/bermsec/berm/testenv/tlstest"
)

// A real call whose credential berm injected (the tool holds a placeholder; a local HTTPS
// server answers only the secret) shows its credential surface as "enforced (inject)" in
// every matrix: berm matrix from the journal and from ClickHouse (table and JSON), and the
// Grafana datasource's matrix and call summary; a call with the credential in its
// environment stays "enforced".
func TestAnInjectedCallsCredentialSurfaceIsEnforcedInjectInEveryMatrix(t *testing.T) {
	bermbin.RequireRoot(t)
	b := make([]byte, 16)
	rand.Read(b)
	secret := "sk-live-" + hex.EncodeToString(b)
	h := fnv.New32a()
	h.Write([]byte(t.Name()))
	ip := fmt.Sprintf("127.%d.%d.10", 100+byte(h.Sum32())%100, byte(h.Sum32()>>8)|1)
	ca := tlstest.NewCA(t, "upstream matrix root")
	tlstest.Serve(t, ip+":443", ca.Leaf(t, "api.test"), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+secret {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, "authorized")
	}))
	up := dnstest.Start(t, dnstest.Zone{"api.test": {dnstest.A("api.test", ip, 60)}})
	pols := map[string]string{}
	for name, deliver := range map[string]string{
		"injected": "{env: API_TOKEN, inject: {hosts: [api.test], allowPrivate: true}}",
		"brokered": "{env: API_TOKEN}",
	} {
		pols[name] = filepath.Join(t.TempDir(), name+".yaml")
		os.WriteFile(pols[name], []byte(`apiVersion: berm.dev/v1alpha1
kind: ToolPolicy
metadata: {name: matrix-`+name+`}
spec:
  isolation: {network: host-filtered}
  resources: {disk: 64Gi}
  credentials:
    - name: api
      source: {env: MATRIX_API_SECRET}
      deliver: `+deliver+`
`), 0o644)
	}
	bin := bermbin.Path(t, "berm")
	state := t.TempDir()
	start := time.Now().Add(-time.Minute)
	for _, tool := range []string{"injected", "brokered"} {
		cmd := exec.Command(bin, "run", "--daemon", "never", "--state-dir", state, "--no-rules", "--tenant", "acme", "--tool", tool, "--call-id", tool,
			"--workspace", bermbin.Workspace(t), "--policy", pols[tool], "--dns-upstream", up.Addr, "--",
			"sh", "-c", `curl -sS --max-time 20 -H "Authorization: Bearer $API_TOKEN" https://api.test/ || true`)
		cmd.Env = append(os.Environ(), "MATRIX_API_SECRET="+secret, "BERM_INJECT_UPSTREAM_CA="+ca.PEMPath)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("berm run %s: %v\n%s", tool, err, out)
		}
		if tool == "injected" && !strings.Contains(string(out), "authorized") {
			t.Fatalf("the injected call was not authorized: %s", out)
		}
	}

	s := chtest.ForTest(t, chtest.Config{})
	dsn := s.DSN("berm")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{s.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.Exec(ctx, "CREATE DATABASE IF NOT EXISTS berm"); err != nil {
		t.Fatal(err)
	}
	c, err := collector.New(collector.Config{StateDir: state, DSN: dsn, BatchInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.RunOnce(ctx); err != nil {
		t.Fatalf("ship the journal: %v", err)
	}

	want := map[string]string{"injected": "enforced (inject)", "brokered": "enforced"}
	for _, src := range [][]string{nil, {"--source", dsn}} {
		out, err := exec.Command(bin, append([]string{"matrix", "--state-dir", state, "--since", "1h", "--surface", "credential"}, src...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("berm matrix %v: %v\n%s", src, err, out)
		}
		for tool, w := range want {
			if !regexp.MustCompile(`(?m)^` + tool + ` +1 +` + regexp.QuoteMeta(w) + ` 1/1$`).Match(out) {
				t.Errorf("berm matrix %v: no %q for %s:\n%s", src, w, tool, out)
			}
		}
		out, err = exec.Command(bin, append([]string{"matrix", "--state-dir", state, "--since", "1h", "--json"}, src...)...).Output()
		if err != nil {
			t.Fatalf("berm matrix --json %v: %v", src, err)
		}
		var m audit.Matrix
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatal(err)
		}
		for _, tr := range m.Tools {
			for _, cell := range tr.Cells {
				if cell.Surface != event.SurfaceCredential {
					continue
				}
				if got := cell.Label(); got != want[tr.Tool] || cell.Inject > 1 {
					t.Errorf("berm matrix --json %v: %s's credential cell %+v (%q), want %q", src, tr.Tool, cell, got, want[tr.Tool])
				}
			}
		}
	}

	f := &fixture{dsn: dsn, server: s, start: start}
	pc := pluginCtx("berm", map[string]string{"dsn": dsn})
	client := pluginClient(t)
	m := f.must(t, client, pc, map[string]any{"queryType": "matrix"})[0]
	for tool, w := range want {
		if got := find(t, m, "tool", tool)["credential"]; got != w {
			t.Errorf("grafana's matrix: %s × credential = %q, want %q", tool, got, w)
		}
	}
	keys := f.must(t, client, pc, map[string]any{"queryType": "calls", "tool": "injected"})[0]
	key := find(t, keys, "call_id", "injected")["call_key"]
	sum := f.must(t, client, pc, map[string]any{"queryType": "call_summary", "call": key})[0]
	if r := find(t, sum, "field", "surface credential"); r["value"] != "enforced (inject)" {
		t.Errorf("grafana's call summary of the injected call: credential %q, want %q", r["value"], "enforced (inject)")
	}
}
