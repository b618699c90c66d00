package dashboards

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"
	sdklog "github.com/grafana/grafana-plugin-sdk-go/backend/log"
	"github.com/grafana/grafana-plugin-sdk-go/data"
	"github.com/grafana/grafana-plugin-sdk-go/experimental/datasourcetest"

	"github.com/bermsec/berm/dashboards/plugin"
	chtest "github.com/bermsec/berm/testenv/clickhouse"
)

// boardUIDs are the provisioned dashboards the tests read through Grafana.
var boardUIDs = []string{"berm-matrix", "berm-escape", "berm-call", "berm-agent"}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), ".."))
}

// pluginClient runs the plugin's real gRPC server in-process (the SDK's standalone mode, as
// Grafana talks to it) and returns its client. One server serves the test binary: the SDK
// registers its metrics on the default registry, which a second server would register again
// (a panic); the process's end stops it.
func pluginClient(t *testing.T) *datasourcetest.TestPluginClient {
	t.Helper()
	plug.once.Do(func() {
		quiet := sdklog.NewWithLevel(sdklog.Warn) // its request log at debug is noise here
		sdklog.DefaultLogger, backend.Logger = quiet, quiet
		port, err := chtest.FreePort()
		if err != nil {
			plug.err = err
			return
		}
		tp, err := datasourcetest.Manage(plugin.NewDatasource, datasourcetest.ManageOpts{Address: fmt.Sprintf("127.0.0.1:%d", port)})
		if err != nil {
			plug.err = err
			return
		}
		plug.client = tp.Client
	})
	if plug.err != nil {
		t.Fatalf("start plugin: %v", plug.err)
	}
	return plug.client
}

var plug struct {
	once   sync.Once
	client *datasourcetest.TestPluginClient
	err    error
}

// pluginCtx is a datasource's context. Its Updated time is its settings' digest: the plugin
// keeps one instance per datasource until Updated changes, so two tests' datasources of one
// UID on different ClickHouse servers (one plugin server per test binary) are two instances.
func pluginCtx(uid string, jsonData map[string]string) backend.PluginContext {
	b, _ := json.Marshal(jsonData)
	h := fnv.New32a()
	h.Write(b)
	return backend.PluginContext{PluginID: plugin.ID, OrgID: 1, DataSourceInstanceSettings: &backend.DataSourceInstanceSettings{
		UID: uid, Type: plugin.ID, Name: uid, JSONData: b, Updated: time.Unix(1+int64(h.Sum32()), 0)}}
}

// ask runs one query through the plugin client and returns its frames, or its error.
func (f *fixture) ask(t *testing.T, c *datasourcetest.TestPluginClient, pc backend.PluginContext, q map[string]any) (data.Frames, error) {
	t.Helper()
	b, _ := json.Marshal(q)
	qt, _ := q["queryType"].(string)
	resp, err := c.QueryData(context.Background(), &backend.QueryDataRequest{PluginContext: pc, Queries: []backend.DataQuery{{
		RefID: "A", QueryType: qt, JSON: b, Interval: time.Minute, MaxDataPoints: 500,
		TimeRange: backend.TimeRange{From: f.start.Add(-time.Hour), To: time.Now().Add(time.Hour)},
	}}})
	if err != nil {
		t.Fatalf("query data over grpc: %v", err)
	}
	r := resp.Responses["A"]
	if r.Error != nil {
		return nil, r.Error
	}
	return r.Frames, nil
}

func (f *fixture) must(t *testing.T, c *datasourcetest.TestPluginClient, pc backend.PluginContext, q map[string]any) data.Frames {
	t.Helper()
	fr, err := f.ask(t, c, pc, q)
	if err != nil {
		t.Fatalf("query %v: %v", q, err)
	}
	return fr
}

// col returns a field's values as strings.
func col(t *testing.T, fr *data.Frame, name string) []string {
	t.Helper()
	for _, fl := range fr.Fields {
		if fl.Name == name {
			out := make([]string, fl.Len())
			for i := range out {
				v, _ := fl.ConcreteAt(i)
				out[i] = fmt.Sprint(v)
			}
			return out
		}
	}
	var names []string
	for _, fl := range fr.Fields {
		names = append(names, fl.Name)
	}
	t.Fatalf("frame %s has no field %s (has %v)", fr.Name, name, names)
	return nil
}

// row is row i of a frame as name -> text.
func row(fr *data.Frame, i int) map[string]string {
	m := map[string]string{}
	for _, fl := range fr.Fields {
		v, _ := fl.ConcreteAt(i)
		m[fl.Name] = fmt.Sprint(v)
	}
	return m
}

// find is the first row whose field has the value.
func find(t *testing.T, fr *data.Frame, field, value string) map[string]string {
	t.Helper()
	for i, v := range col(t, fr, field) {
		if v == value {
			return row(fr, i)
		}
	}
	t.Fatalf("frame %s: no row with %s = %q (have %v)", fr.Name, field, value, col(t, fr, field))
	return nil
}

var varRef = regexp.MustCompile(`\$\{(\w+)(?::(\w+))?\}|\$(\w+)`)

// interpolate does what the frontend (module.js applyTemplateVariables, Grafana's template
// service) does to a target before it is sent: variables replaced by their values, lists
// joined with commas.
func interpolate(t *testing.T, v any, vars map[string]string) any {
	switch x := v.(type) {
	case string:
		return varRef.ReplaceAllStringFunc(x, func(m string) string {
			s := varRef.FindStringSubmatch(m)
			name := s[1] + s[3]
			val, ok := vars[name]
			if !ok {
				if strings.HasPrefix(name, "__") {
					return m
				}
				t.Fatalf("variable %s has no value in the test", name)
			}
			return val
		})
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			out[k] = interpolate(t, e, vars)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = interpolate(t, e, vars)
		}
		return out
	}
	return v
}

// installPlugin builds the plugin as make build does, into dir/berm-datasource.
func installPlugin(t *testing.T, dir string) {
	t.Helper()
	pd := filepath.Join(dir, plugin.ID)
	if err := os.MkdirAll(filepath.Join(pd, "img"), 0o755); err != nil {
		t.Fatal(err)
	}
	exe := fmt.Sprintf("gpx_berm-datasource_%s_%s", runtime.GOOS, runtime.GOARCH)
	cmd := exec.Command("go", "build", "-o", filepath.Join(pd, exe), "./dashboards/plugin/cmd/berm-datasource")
	cmd.Dir = repoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build plugin: %v\n%s", err, out)
	}
	for _, f := range []string{"plugin.json", "module.js", "img/logo.svg"} {
		b, err := os.ReadFile(filepath.Join(repoRoot(), "dashboards", "plugin", "dist", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pd, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// installDashboards copies the dashboards' JSON into dir, as make build does into
// bin/grafana/dashboards.
func installDashboards(t *testing.T, dir string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(repoRoot(), "dashboards", "*.json"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
