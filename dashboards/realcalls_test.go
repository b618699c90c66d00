package dashboards

import (
	"github.com/bermsec/berm/agent/event"
	"time"

	"fmt"
	"github.com/ClickHouse/clickhouse-go/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/grafana/grafana-plugin-sdk-go/backend"
	"github.com/grafana/grafana-plugin-sdk-go/data"
	"github.com/grafana/grafana-plugin-sdk-go/experimental/datasourcetest"
)

// TestRealCalls runs real calls (a benign one, a denial, an alert, a limit hit, a neighbour
// tenant's hostile one) through berm run, ships them with the collector to a real ClickHouse,
// and reads them back through the plugin over the SDK's gRPC path, through every panel of every
// dashboard, and through a real Grafana.
func TestRealCalls(t *testing.T) {
	f := newFixture(t)
	c := pluginClient(t)
	pc := pluginCtx("berm", map[string]string{"dsn": f.dsn})

	t.Run("health", func(t *testing.T) {
		res, err := c.CheckHealth(t.Context(), &backend.CheckHealthRequest{PluginContext: pc})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != backend.HealthStatusOk || !strings.Contains(res.Message, "schema version") {
			t.Fatalf("health: %v %s", res.Status, res.Message)
		}
		bad := pluginCtx("down", map[string]string{"dsn": "clickhouse://127.0.0.1:1/berm?dial_timeout=1s"})
		res, err = c.CheckHealth(t.Context(), &backend.CheckHealthRequest{PluginContext: bad})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != backend.HealthStatusError {
			t.Fatalf("health of a datasource whose ClickHouse is down: %v %s", res.Status, res.Message)
		}
		empty := pluginCtx("empty", map[string]string{"dsn": f.server.DSN("default")})
		res, _ = c.CheckHealth(t.Context(), &backend.CheckHealthRequest{PluginContext: empty})
		if res.Status != backend.HealthStatusError || !strings.Contains(res.Message, "no berm tables") {
			t.Fatalf("health of a database with no berm tables: %v %s", res.Status, res.Message)
		}
	})

	t.Run("query types", func(t *testing.T) { f.checkQueryTypes(t, c, pc) })
	t.Run("hostile", func(t *testing.T) { f.checkHostile(t, c, pc) })
	t.Run("panels", func(t *testing.T) { f.checkPanels(t, c, pc) })
	t.Run("grafana", func(t *testing.T) { f.checkGrafana(t, c, pc) })

	// last, as it changes the schema's record: a schema older than the plugin reads is
	// reported by the health check, with what to do
	t.Run("old schema", func(t *testing.T) {
		conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{f.server.Addr()}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var latest uint32
		if err := conn.QueryRow(t.Context(), "SELECT max(version) FROM berm.schema_migrations").Scan(&latest); err != nil {
			t.Fatal(err)
		}
		if err := conn.Exec(t.Context(), fmt.Sprintf("ALTER TABLE berm.schema_migrations DELETE WHERE version = %d", latest)); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute) // ALTER DELETE is a mutation, applied in the background
		for {
			res, err := c.CheckHealth(t.Context(), &backend.CheckHealthRequest{PluginContext: pc})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status == backend.HealthStatusError {
				if want := fmt.Sprintf("at version %d, this plugin reads version %d", latest-1, latest); !strings.Contains(res.Message, want) {
					t.Errorf("health of an old schema: %q, want %q", res.Message, want)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("health still %v (%s) with schema version %d gone", res.Status, res.Message, latest)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

func (f *fixture) checkQueryTypes(t *testing.T, c *datasourcetest.TestPluginClient, pc backend.PluginContext) {
	calls := f.must(t, c, pc, map[string]any{"queryType": "calls", "tenant": "acme"})[0]
	if ids := col(t, calls, "call_id"); len(ids) != 4 || slices.Contains(ids, "neighbour") {
		t.Errorf("acme's calls: %v", ids)
	}
	if r := find(t, calls, "call_id", "limit"); r["end_reason"] != "timeout" {
		t.Errorf("the limit call: %v", r)
	}
	if got := col(t, f.must(t, c, pc, map[string]any{"queryType": "calls", "endReason": "timeout"})[0], "call_id"); !slices.Equal(got, []string{"limit"}) {
		t.Errorf("calls ended by timeout: %v", got)
	}
	if got := col(t, f.must(t, c, pc, map[string]any{"queryType": "calls", "surface": "isolation"})[0], "call_id"); !slices.Equal(got, []string{"alert"}) {
		t.Errorf("calls violating isolation (the escape alert): %v", got)
	}
	if got := col(t, f.must(t, c, pc, map[string]any{"queryType": "calls", "tool": "writer,sleeper"})[0], "call_id"); len(got) != 2 {
		t.Errorf("calls of two tools: %v", got)
	}
	if got := col(t, f.must(t, c, pc, map[string]any{"queryType": "calls", "complete": "false"})[0], "call_id"); len(got) != 0 {
		t.Errorf("incomplete calls: %v", got)
	}

	// the matrix says what each call's record says (one call per tool here)
	m := f.must(t, c, pc, map[string]any{"queryType": "matrix"})[0]
	for _, fc := range fixtureCalls {
		rec := f.recs[fc.name]
		if len(rec.Surfaces) != 6 {
			t.Fatalf("call %s's record has %d surfaces", fc.name, len(rec.Surfaces))
		}
		r := find(t, m, "tool", fc.tool)
		for _, s := range rec.Surfaces {
			want := s.State
			if s.Violations > 0 {
				want = fmt.Sprintf("violated ×%d", s.Violations)
			} else if s.State == event.StateDegraded && s.Reason != "" {
				rs := strings.Split(s.Reason, "; ")
				slices.Sort(rs)
				want += ": " + strings.Join(rs, "; ") // the matrix says why, reasons sorted
			}
			if r[s.Surface] != want {
				t.Errorf("matrix %s × %s = %q, the call's record says %q", fc.tool, s.Surface, r[s.Surface], want)
			}
		}
	}
	// and the violations are the fixture's
	for _, want := range []struct{ tool, surface, state string }{
		{"shell", "credential", "enforced"}, // the broker: every call
		{"shell", "approval", "absent"},
		{"writer", "policy", "violated ×4"}, // two Landlock denials and the denied-write rules' two alerts
		{"escaper", "isolation", "violated ×1"},
		{"escaper", "policy", "violated ×1"},   // seccomp refused the unshare
		{"sleeper", "resource", "violated ×2"}, // the limit hit and its alert
		{"planter", "policy", "violated ×2"},   // the egress denial and the /dev/tcp rule's alert
	} {
		if got := find(t, m, "tool", want.tool)[want.surface]; got != want.state {
			t.Errorf("matrix %s × %s = %q, want %q", want.tool, want.surface, got, want.state)
		}
	}
	for _, s := range []string{"policy", "isolation", "resource", "observability"} {
		if st := find(t, m, "tool", "shell")[s]; strings.HasPrefix(st, "violated") || st == "absent" {
			t.Errorf("the benign call's %s: %s", s, st)
		}
	}

	st := row(f.must(t, c, pc, map[string]any{"queryType": "stats"})[0], 0)
	if st["calls"] != "5" || st["calls_with_violations"] != "4" || st["incomplete"] != "0" || st["dropped_events"] != "0" {
		t.Errorf("stats: %v", st)
	}

	v := f.must(t, c, pc, map[string]any{"queryType": "violations_over_time"})[0]
	var series []string
	for _, fl := range v.Fields[1:] {
		series = append(series, fl.Config.DisplayNameFromDS)
	}
	slices.Sort(series)
	if !slices.Equal(series, []string{"isolation", "policy", "resource"}) || v.Fields[0].Type() != data.FieldTypeTime {
		t.Errorf("violations over time: series %v, first field %v", series, v.Fields[0].Type())
	}
	top := f.must(t, c, pc, map[string]any{"queryType": "top_tools"})[0]
	if r := row(top, 0); r["tool"] != "escaper" && r["tool"] != "writer" && r["tool"] != "sleeper" {
		t.Errorf("top tool: %v", r)
	}
	if n := f.sum(t, top, "violations"); n != 10 {
		t.Errorf("violations of all tools: %d, want 10 (4 writer, 2 escaper, 2 sleeper, 2 planter)", n)
	}

	// one series per severity the calls' alerts have, after the time
	severities := map[string]bool{}
	for _, sev := range col(t, f.must(t, c, pc, map[string]any{"queryType": "alerts"})[0], "severity") {
		severities[sev] = true
	}
	a := f.must(t, c, pc, map[string]any{"queryType": "alerts_over_time", "groupBy": "severity"})[0]
	if len(a.Fields) != 1+len(severities) || !severities["high"] || !severities["low"] || a.Fields[0].Type() != data.FieldTypeTime {
		t.Errorf("alerts by severity: %d fields, want time and one per severity of %v (high and low among them)", len(a.Fields), severities)
	}
	rules := f.must(t, c, pc, map[string]any{"queryType": "top_rules"})[0]
	find(t, rules, "rule", "escape-unshare")
	find(t, rules, "rule", "resource-wall-time")
	alerts := f.must(t, c, pc, map[string]any{"queryType": "alerts", "surface": "isolation"})[0]
	if r := find(t, alerts, "rule", "escape-unshare"); r["call_key"] != f.keys["alert"] || r["severity"] != "high" {
		t.Errorf("the escape alert: %v", r)
	}
	fs := f.must(t, c, pc, map[string]any{"queryType": "first_seen", "tool": "escaper"})[0]
	find(t, fs, "binary", "/usr/bin/unshare")
	es := f.must(t, c, pc, map[string]any{"queryType": "escape_syscalls"})[0]
	if r := find(t, es, "tool", "escaper"); r["syscall"] != "unshare" || r["failed"] == "0" {
		t.Errorf("escape syscalls: %v", r)
	}
	eg := f.must(t, c, pc, map[string]any{"queryType": "egress_denials"})[0]
	if r := find(t, eg, "call_key", f.keys["neighbour"]); r["destination"] != "203.0.113.7:443" || r["layer"] != "bpf-cgroup-sock" {
		t.Errorf("egress denial: %v", r)
	}
	for _, qt := range []string{"drops", "completeness", "ingest_lag", "backlog"} {
		fr := f.must(t, c, pc, map[string]any{"queryType": qt})
		if len(fr) != 1 || len(fr[0].Fields) < 2 {
			t.Errorf("%s: %v", qt, fr)
		}
	}
	if r := find(t, f.must(t, c, pc, map[string]any{"queryType": "completeness"})[0], "host", find(t, calls, "call_id", "benign")["host"]); r["calls"] != "5" || r["complete_percent"] != "100" {
		t.Errorf("completeness: %v", r)
	}

	sum := f.must(t, c, pc, map[string]any{"queryType": "call_summary", "call": f.keys["alert"]})[0]
	if r := find(t, sum, "field", "surface isolation"); r["value"] != "violated ×1" {
		t.Errorf("the alert call's isolation: %v", r)
	}
	if r := find(t, sum, "field", "surface credential"); r["value"] != "enforced" {
		t.Errorf("the alert call's credential surface: %v", r)
	}
	find(t, sum, "field", "tool")

	tl := f.must(t, c, pc, map[string]any{"queryType": "timeline", "call": f.keys["neighbour"]})[0]
	if tl.Meta == nil || tl.Meta.PreferredVisualization != data.VisTypeLogs || tl.Fields[0].Type() != data.FieldTypeTime {
		t.Errorf("timeline frame: %+v", tl.Meta)
	}
	bodies := strings.Join(col(t, tl, "body"), "\n")
	if !strings.Contains(bodies, strconv.Quote("/tmp/"+hostileName)) {
		t.Errorf("the planted name is not in the timeline as quoted text:\n%s", bodies)
	}
	if !slices.Contains(col(t, tl, "level"), "warning") {
		t.Errorf("no denial (warning) in the neighbour's timeline")
	}

	// a timeline cut at its limit says so
	cut := f.must(t, c, pc, map[string]any{"queryType": "timeline", "call": f.keys["neighbour"], "limit": 3})[0]
	if cut.Rows() != 3 || cut.Meta == nil || len(cut.Meta.Notices) == 0 {
		t.Errorf("a timeline cut at 3 rows: %d rows, meta %+v", cut.Rows(), cut.Meta)
	}

	pt := f.must(t, c, pc, map[string]any{"queryType": "process_tree", "call": f.keys["neighbour"]})
	if len(pt) != 2 || pt[0].Meta.PreferredVisualization != data.VisTypeNodeGraph {
		t.Fatalf("process tree: %v", pt)
	}
	titles := col(t, pt[0], "title")
	for _, want := range []string{"/bin/bash", "/usr/bin/touch", "/usr/bin/cat"} {
		if !slices.Contains(titles, want) {
			t.Errorf("process tree has no %s: %v", want, titles)
		}
	}
	bash := find(t, pt[0], "title", "/bin/bash")["id"]
	touch := find(t, pt[0], "title", "/usr/bin/touch")["id"]
	find(t, pt[1], "id", bash+"-"+touch)

	files := f.must(t, c, pc, map[string]any{"queryType": "call_files", "call": f.keys["benign"]})[0]
	if r := find(t, files, "path", "/etc/hostname"); r["failed"] != "0" {
		t.Errorf("benign call's /etc/hostname: %v", r)
	}
	nw := f.must(t, c, pc, map[string]any{"queryType": "call_network", "call": f.keys["neighbour"]})[0]
	if r := find(t, nw, "address", "203.0.113.7"); r["port"] != "443" || r["errno"] != "EPERM" {
		t.Errorf("neighbour's refused connect: %v", r)
	}
	dn := f.must(t, c, pc, map[string]any{"queryType": "call_denials", "call": f.keys["denial"]})[0]
	if objs := col(t, dn, "object"); !slices.Equal(objs, []string{"/etc/berm-dashboards-denied", "/usr/berm-denied"}) {
		t.Errorf("the denial call's denials: %v", objs)
	}
	ca := f.must(t, c, pc, map[string]any{"queryType": "alerts", "call": f.keys["limit"]})[0]
	if got := col(t, ca, "rule"); !slices.Equal(got, []string{"resource-wall-time"}) {
		t.Errorf("the limit call's alerts: %v", got)
	}
	tenants := col(t, f.must(t, c, pc, map[string]any{"queryType": "values", "field": "tenant"})[0], "value")
	if !slices.Equal(tenants, []string{"acme", "evil"}) {
		t.Errorf("tenant values: %v", tenants)
	}
	recent := col(t, f.must(t, c, pc, map[string]any{"queryType": "values", "field": "call", "tenant": "acme"})[0], "value")
	if len(recent) != 4 || recent[0] != f.keys["neighbour"] && !slices.Contains(recent, f.keys["limit"]) {
		t.Errorf("recent calls of acme: %v", recent)
	}
	if _, err := f.ask(t, c, pc, map[string]any{"queryType": "no_such"}); err == nil || !strings.Contains(err.Error(), "not known") {
		t.Errorf("an unknown query type: %v", err)
	}
}

func (f *fixture) sum(t *testing.T, fr *data.Frame, field string) int {
	n := 0
	for _, v := range col(t, fr, field) {
		i, _ := strconv.Atoi(v)
		n += i
	}
	return n
}
