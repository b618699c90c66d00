package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/bermsec/berm/testenv/bermbin"
)

// The stack with Grafana: a real call through its bermd reaches the tools × surfaces matrix
// as Grafana serves it, through berm's provisioned datasource (/api/ds/query, as the
// dashboard's panel asks). Grafana starts without its web UI (the API is what is read).
func TestTheStackWithGrafanaShowsARealCallsToolInTheMatrix(t *testing.T) {
	bermbin.RequireRoot(t)
	bin := stackBin(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := Up(ctx, Config{Bin: bin, Dir: dir, Node: "stackgrafana-node", Grafana: true, NoFrontend: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Down()
	if s.Info.Grafana == "" {
		t.Fatal("the stack did not say where Grafana is")
	}

	const tenant, tool = "stackgrafana", "TestTheStackWithGrafana-tool"
	r := bermbin.Berm(t, nil, "run", "--socket", s.Info.Socket, "--daemon", "required", "--call-id", "TestTheStackWithGrafana-1", "--tenant", tenant, "--tool", tool, "--", "/bin/cat", "/etc/hostname")
	if r.Exit != 0 {
		t.Fatalf("a call through the stack's bermd: exit %d\n%s\n%s", r.Exit, r.Stderr, tail(filepath.Join(s.Info.Logs, "bermd.log")))
	}
	// the matrix panel's query, through Grafana: the call's tool appears once it is shipped
	var tools []string
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		tools, err = matrixTools(s.Info, tenant)
		if err == nil && slices.Contains(tools, tool) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Grafana's matrix of tenant %s after 2 minutes: tools %v, err %v\ncollector log:\n%s\ngrafana log:\n%s", tenant, tools, err,
				tail(filepath.Join(s.Info.Logs, "berm-collector.log")), tail(filepath.Join(dir, "grafana", "log", "grafana.log")))
		}
	}
	if len(tools) != 1 {
		t.Errorf("Grafana's matrix of tenant %s has tools %v, want only %s", tenant, tools, tool)
	}
	// a tenant with no call has no row: the matrix is the tenant's, not everything's
	if other, err := matrixTools(s.Info, "stackgrafana-none"); err != nil || len(other) != 0 {
		t.Errorf("Grafana's matrix of a tenant without calls: tools %v, err %v", other, err)
	}
}

// matrixTools asks Grafana for the tools × surfaces panel's query (queryType matrix) of the
// last hour for tenant, through berm's datasource (uid berm), and gives the frame's tool column
// (and, with calls, its calls column into *calls).
func matrixTools(in Info, tenant string, calls ...*[]float64) ([]string, error) {
	now := time.Now()
	body, _ := json.Marshal(map[string]any{
		"queries": []any{map[string]any{
			"refId": "A", "datasource": map[string]string{"type": "berm-datasource", "uid": "berm"},
			"queryType": "matrix", "tenant": tenant, "intervalMs": 1000, "maxDataPoints": 1000,
		}},
		"from": fmt.Sprint(now.Add(-time.Hour).UnixMilli()), "to": fmt.Sprint(now.Add(time.Minute).UnixMilli()),
	})
	req, err := http.NewRequest("POST", in.Grafana+"/api/ds/query", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.SetBasicAuth(in.GrafanaUser, in.GrafanaPass)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out struct {
		Results map[string]struct {
			Error  string `json:"error"`
			Frames []struct {
				Schema struct {
					Fields []struct {
						Name string `json:"name"`
					} `json:"fields"`
				} `json:"schema"`
				Data struct {
					Values [][]any `json:"values"`
				} `json:"data"`
			} `json:"frames"`
		} `json:"results"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("/api/ds/query: %s: %w", resp.Status, err)
	}
	a := out.Results["A"]
	if a.Error != "" || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/api/ds/query: %s: %s", resp.Status, a.Error)
	}
	var tools []string
	var callsOut *[]float64
	if len(calls) > 0 {
		callsOut = calls[0]
	}
	for _, f := range a.Frames {
		for i, fl := range f.Schema.Fields {
			if fl.Name == "tool" && i < len(f.Data.Values) {
				for _, v := range f.Data.Values[i] {
					tools = append(tools, fmt.Sprint(v))
				}
			}
			if fl.Name == "calls" && i < len(f.Data.Values) && callsOut != nil {
				for _, v := range f.Data.Values[i] {
					n, _ := v.(float64)
					*callsOut = append(*callsOut, n)
				}
			}
		}
	}
	return tools, nil
}

// stackBin lays out what make build gives the stack: the test-built binaries and bin/grafana
// (the datasource plugin built as make build does, the dashboards and their provisioning).
func stackBin(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	for _, name := range []string{"bermd", "berm-collector", "berm-init"} {
		if err := os.Symlink(bermbin.Path(t, name), filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	pd := filepath.Join(bin, "grafana", "berm-datasource")
	for _, d := range []string{filepath.Join(pd, "img"), filepath.Join(bin, "grafana", "dashboards")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	build := exec.Command("go", "build", "-o", filepath.Join(pd, fmt.Sprintf("gpx_berm-datasource_%s_%s", runtime.GOOS, runtime.GOARCH)), "./dashboards/plugin/cmd/berm-datasource")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the plugin: %v\n%s", err, out)
	}
	copyFile := func(from, to string) {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"plugin.json", "module.js", "img/logo.svg"} {
		copyFile(filepath.Join(root, "dashboards", "plugin", "dist", f), filepath.Join(pd, f))
	}
	boards, _ := filepath.Glob(filepath.Join(root, "dashboards", "*.json"))
	for _, f := range boards {
		copyFile(f, filepath.Join(bin, "grafana", "dashboards", filepath.Base(f)))
	}
	if err := os.CopyFS(filepath.Join(bin, "grafana", "provisioning"), os.DirFS(filepath.Join(root, "dashboards", "provisioning"))); err != nil {
		t.Fatal(err)
	}
	return bin
}
