package plugin

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"
	"github.com/grafana/grafana-plugin-sdk-go/data"

	"github.com/bermsec/berm/collector"
	"github.com/bermsec/berm/collector/query"
	"github.com/bermsec/berm/testenv/npmci"
	"github.com/bermsec/berm/testenv/testutil"
)

var update = flag.Bool("update", false, "rewrite the golden responses frontendtest reads")

// frontendPackages are frontendtest's locked packages: react, Grafana's and jsdom.
var frontendPackages = npmci.Packages{Dir: "frontendtest", Name: "frontendtest", CacheEnv: "BERM_FRONTEND_CACHE"}

// TestFrontend runs dist/module.js in node against the npm builds of react, @grafana/data,
// @grafana/runtime and @grafana/ui (frontendtest/, node's test runner, jsdom): its config and
// query editors rendered and typed into, its template interpolation and variable queries
// through the real DataSourceWithBackend. Then the backend parses every query the frontend
// produced.
func TestFrontend(t *testing.T) {
	testutil.Integration(t, "node and the npm packages of frontendtest")
	node, err := exec.LookPath("node")
	if err != nil {
		testutil.Unavailable(t, "node is not installed: module.js is not run against Grafana's packages (testenv/install-deps.sh installs nodejs and npm)")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		testutil.Unavailable(t, "npm is not installed: frontendtest's packages cannot be installed (testenv/install-deps.sh installs it)")
	}
	modules := npmci.Install(t, npm, frontendPackages)

	var types []string
	for _, qt := range query.Types() {
		types = append(types, qt[0])
	}
	typesJSON, _ := json.Marshal(types)
	fieldsJSON, _ := json.Marshal(typeFields(t))
	out := t.TempDir()
	cmd := exec.Command(node, "--test", "--test-reporter=tap", "config.test.js", "query.test.js", "variables.test.js")
	cmd.Dir = "frontendtest"
	cmd.Env = append(os.Environ(),
		"BERM_FRONTEND_MODULES="+modules, "BERM_FRONTEND_OUT="+out,
		"BERM_QUERY_TYPES="+string(typesJSON), "BERM_TYPE_FIELDS="+string(fieldsJSON))
	res, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, res)
	}
	summary := regexpTAP(res)
	t.Logf("node --test: %s", summary)
	if !strings.Contains(summary, "fail 0") || !strings.Contains(summary, "skipped 0") || !strings.Contains(summary, "cancelled 0") || strings.Contains(summary, "pass 0") {
		t.Errorf("node --test did not run every test: %s\n%s", summary, res)
	}

	t.Run("editor queries", func(t *testing.T) {
		var recs []struct {
			Typed map[string]string `json:"typed"`
			Query json.RawMessage   `json:"query"`
		}
		readOut(t, out, "editor-queries", &recs)
		if len(recs) != len(types) {
			t.Fatalf("%d editor queries, want one per type (%d)", len(recs), len(types))
		}
		for _, r := range recs {
			m, p := parse(t, r.Query)
			got := modelJSON(t, m)
			for f, v := range r.Typed {
				if got[f] != v {
					t.Errorf("%s: typed %s=%q, the backend read %q", m.QueryType, f, v, got[f])
				}
			}
			if _, err := query.Build(m.QueryType, p); err != nil {
				t.Errorf("%s: the editor's query does not build: %v", m.QueryType, err)
			}
		}
	})

	t.Run("interpolated requests", func(t *testing.T) {
		var recs []struct {
			Name  string          `json:"name"`
			Query json.RawMessage `json:"query"`
			Want  struct {
				Tenants, Tools, Hosts []string
				Call                  string
			} `json:"want"`
		}
		readOut(t, out, "requests", &recs)
		t.Logf("%d requests the runtime built", len(recs))
		if len(recs) == 0 {
			t.Fatal("no request recorded")
		}
		for _, r := range recs {
			_, p := parse(t, r.Query)
			if !slices.Equal(p.Tenants, r.Want.Tenants) || !slices.Equal(p.Tools, r.Want.Tools) ||
				!slices.Equal(p.Hosts, r.Want.Hosts) || p.Call != r.Want.Call {
				t.Errorf("%s: the backend read tenants %q tools %q hosts %q call %q, the frontend meant %+v\n%s",
					r.Name, p.Tenants, p.Tools, p.Hosts, p.Call, r.Want, r.Query)
			}
		}
	})
}

// regexpTAP is the closing counts of node's TAP output.
func regexpTAP(out []byte) string {
	var keep []string
	for _, l := range strings.Split(string(out), "\n") {
		for _, k := range []string{"# tests ", "# pass ", "# fail ", "# skipped ", "# cancelled "} {
			if strings.HasPrefix(l, k) {
				keep = append(keep, strings.TrimPrefix(l, "# "))
			}
		}
	}
	return strings.Join(keep, ", ")
}

func readOut(t *testing.T, dir, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name+".json"))
	if err != nil {
		t.Fatalf("the node tests recorded no %s: %v", name, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// parse reads a query the frontend sent as Grafana's server hands it to the plugin: its JSON
// as the DataQuery's, the panel's range.
func parse(t *testing.T, raw json.RawMessage) (Model, query.Params) {
	t.Helper()
	to := time.Unix(1_800_000_000, 0)
	q := backend.DataQuery{RefID: "A", JSON: raw, Interval: time.Minute, MaxDataPoints: 1000,
		TimeRange: backend.TimeRange{From: to.Add(-time.Hour), To: to}}
	m, err := ParseModel(q)
	if err != nil {
		t.Fatalf("ParseModel(%s): %v", raw, err)
	}
	p, err := m.Params(q, collector.Schema{Database: "berm", Dialect: collector.Legacy}, "")
	if err != nil {
		t.Fatalf("Params(%s): %v", raw, err)
	}
	return m, p
}

// modelJSON is the model as the strings the editor typed (limit as its digits).
func modelJSON(t *testing.T, m Model) map[string]string {
	b, _ := json.Marshal(m)
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for k, v := range raw {
		switch v := v.(type) {
		case string:
			out[k] = v
		case float64:
			out[k] = strconv.FormatFloat(v, 'f', -1, 64)
		}
	}
	return out
}

// TestFrontendGolden: the responses frontendtest's stand-in for Grafana's HTTP client answers
// variable queries with are what Grafana's /api/ds/query returns for this plugin's values frame
// (the SDK's JSON of a QueryDataResponse): a list, and a refused query.
func TestFrontendGolden(t *testing.T) {
	values := data.NewFrame("values",
		data.NewField("text", nil, []string{"git", "curl", "<img src=x onerror=alert(1)>"}),
		data.NewField("value", nil, []string{"git", "curl", "<img src=x onerror=alert(1)>"}))
	values.RefID = "berm-values"
	ok := backend.NewQueryDataResponse()
	ok.Responses["berm-values"] = backend.DataResponse{Frames: data.Frames{values}}
	refused := backend.NewQueryDataResponse()
	refused.Responses["berm-values"] = backend.ErrDataResponse(backend.StatusBadRequest, `tool "$tool" is a template variable that was not interpolated`)
	for name, r := range map[string]*backend.QueryDataResponse{"values-response.json": ok, "values-refused.json": refused} {
		b, err := json.MarshalIndent(r, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, '\n')
		path := filepath.Join("frontendtest", "testdata", name)
		if *update {
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		old, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (go test ./dashboards/plugin -run TestFrontendGolden -update)", err)
		}
		if !bytes.Equal(old, b) {
			t.Errorf("%s is stale: go test ./dashboards/plugin -run TestFrontendGolden -update\nhave %s\nwant %s", path, old, b)
		}
	}
}
