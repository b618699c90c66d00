package dashboards

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"
	"github.com/grafana/grafana-plugin-sdk-go/experimental/datasourcetest"

	"github.com/bermsec/berm/dashboards/plugin"
	"github.com/bermsec/berm/testenv/grafana"
)

// checkGrafana installs the plugin and the provisioning into a real Grafana, as the README
// tells a user to, and runs every panel's query of the dashboards Grafana provisioned through
// /api/ds/query: the rows must be those the plugin gives directly.
func (f *fixture) checkGrafana(t *testing.T, c *datasourcetest.TestPluginClient, pc backend.PluginContext) {
	plugins, boards := t.TempDir(), t.TempDir()
	installPlugin(t, plugins)
	installDashboards(t, boards)
	g := grafana.ForTest(t, grafana.Config{
		PluginsDir:   plugins,
		Provisioning: filepath.Join(repoRoot(), "dashboards", "provisioning"),
		Unsigned:     []string{plugin.ID},
		Dashboards:   boardUIDs,
		Env:          []string{"BERM_CLICKHOUSE_DSN=" + f.dsn, "BERM_DASHBOARDS_DIR=" + boards},
	})

	var health struct {
		Status  string `json:"status"`
		Message string `json:"message"`
	}
	if err := g.Get("/api/datasources/uid/berm/health", &health); err != nil || health.Status != "OK" {
		t.Fatalf("datasource health through grafana: %v %+v\n%s", err, health, g.LogTail())
	}
	if !strings.Contains(health.Message, "schema version") {
		t.Errorf("health message: %q", health.Message)
	}

	// the dashboards as Grafana provisioned them
	var ds []dash
	for _, uid := range boardUIDs {
		var resp struct {
			Dashboard json.RawMessage `json:"dashboard"`
			Meta      struct {
				ExternalID  string `json:"provisionedExternalId"`
				FolderTitle string `json:"folderTitle"`
			} `json:"meta"`
		}
		if err := g.Get("/api/dashboards/uid/"+uid, &resp); err != nil {
			t.Fatalf("dashboard %s not provisioned: %v\n%s", uid, err, g.LogTail())
		}
		if !strings.HasSuffix(resp.Meta.ExternalID, ".json") || resp.Meta.FolderTitle != "berm" {
			t.Errorf("dashboard %s: provisioned from %q into folder %q", uid, resp.Meta.ExternalID, resp.Meta.FolderTitle)
		}
		ds = append(ds, parseDash(t, resp.Dashboard))
	}

	from, to := f.start.Add(-time.Hour), time.Now().Add(time.Hour)
	n := 0
	for key, qs := range f.bermTargets(t, ds) {
		for _, q := range qs {
			direct, err := f.ask(t, c, pc, q)
			if err != nil {
				t.Errorf("%s directly: %v", key, err)
				continue
			}
			q["refId"] = "A"
			q["datasource"] = map[string]any{"uid": "berm", "type": plugin.ID}
			q["intervalMs"] = 60000
			q["maxDataPoints"] = 500
			body := map[string]any{"queries": []any{q}, "from": fmt.Sprint(from.UnixMilli()), "to": fmt.Sprint(to.UnixMilli())}
			var resp struct {
				Results map[string]struct {
					Error  string `json:"error"`
					Frames []struct {
						Schema struct {
							Name   string `json:"name"`
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
			if err := g.Do("POST", "/api/ds/query", body, &resp); err != nil {
				t.Errorf("%s through grafana: %v", key, err)
				continue
			}
			r := resp.Results["A"]
			if r.Error != "" {
				t.Errorf("%s through grafana: %s", key, r.Error)
				continue
			}
			if len(r.Frames) != len(direct) {
				t.Errorf("%s: %d frames through grafana, %d directly", key, len(r.Frames), len(direct))
				continue
			}
			for i, fr := range r.Frames {
				rows := 0
				if len(fr.Data.Values) > 0 {
					rows = len(fr.Data.Values[0])
				}
				if rows != direct[i].Rows() || len(fr.Schema.Fields) != len(direct[i].Fields) {
					t.Errorf("%s frame %s: %d rows × %d fields through grafana, %d × %d directly", key, fr.Schema.Name,
						rows, len(fr.Schema.Fields), direct[i].Rows(), len(direct[i].Fields))
				}
			}
			n++
		}
	}
	if n < 25 {
		t.Errorf("only %d panel queries went through grafana", n)
	}
	t.Logf("%d panel queries through grafana's /api/ds/query", n)

	// Grafana logged no error loading the plugin or the provisioning
	log, _ := os.ReadFile(filepath.Join(g.Dir, "logs", "grafana.log"))
	for _, line := range strings.Split(string(log), "\n") {
		// no frontend in the module; sqlite busy in Grafana's own token cleanup
		if strings.Contains(line, "public/build") || strings.Contains(line, "database is locked") {
			continue
		}
		if strings.Contains(line, "level=error") || strings.Contains(line, "lvl=eror") {
			t.Errorf("grafana logged: %s", line)
		}
	}
}

func parseDash(t *testing.T, b []byte) dash {
	var d dash
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Panels []struct {
			Targets []map[string]any `json:"targets"`
		} `json:"panels"`
	}
	json.Unmarshal(b, &raw)
	for i := range d.Panels {
		for j := range d.Panels[i].Targets {
			d.Panels[i].Targets[j].raw = raw.Panels[i].Targets[j]
		}
	}
	return d
}
