package dashboards

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bermsec/berm/dashboards/internal/board"
	"github.com/bermsec/berm/dashboards/plugin"
	"github.com/bermsec/berm/testenv/grafana"
)

// TestDaemonPanels: the panels a running bermd feeds, through a real Grafana: every Prometheus
// panel of agent health against a real Prometheus scraping bermd, the approval and DNS panels
// and the matrix of two hosts against the ClickHouse bermd ships to, and every berm panel of
// every dashboard without an error.
func TestDaemonPanels(t *testing.T) {
	f := newDaemonFixture(t)
	g := f.grafana(t)
	t.Run("prometheus panels", func(t *testing.T) { f.checkPrometheusPanels(t, g) })
	if t.Failed() { // what Prometheus holds, to tell a scrape gap from a metric that did not move
		for _, e := range []string{"up[5m]", "scrape_duration_seconds[5m]", "berm_approval_decision_seconds_count[5m]", "berm_events_dropped_total[5m]", "berm_sandbox_launches_warm_total[5m]"} {
			if resp, err := http.Get(f.prom.URL() + "/api/v1/query?query=" + url.QueryEscape(e)); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				t.Logf("prometheus %s: %s", e, b)
			}
		}
	}
	t.Run("approval and dns panels", func(t *testing.T) { f.checkApprovalDNSPanels(t, g) })
	t.Run("matrix of two hosts", func(t *testing.T) { f.checkMatrixHosts(t, g) })
}

// grafana starts a real Grafana with the plugin, the dashboards and the provisioning as a user
// installs them, plus a Prometheus datasource (uid prometheus, what the agent dashboard's
// prometheus variable picks) pointing at the test's Prometheus, its scrape interval 1 s.
func (f *daemonFixture) grafana(t *testing.T) *grafana.Server {
	t.Helper()
	return f.grafanaWith(t, false)
}

// grafanaWith is grafana, serving the web frontend when frontend is set.
func (f *daemonFixture) grafanaWith(t *testing.T, frontend bool) *grafana.Server {
	t.Helper()
	plugins, boards, prov := t.TempDir(), t.TempDir(), t.TempDir()
	installPlugin(t, plugins)
	installDashboards(t, boards)
	if out, err := exec.Command("cp", "-r", filepath.Join(repoRoot(), "dashboards", "provisioning")+"/.", prov).CombinedOutput(); err != nil {
		t.Fatalf("copy provisioning: %v %s", err, out)
	}
	ds := fmt.Sprintf(`apiVersion: 1
datasources:
  - name: Prometheus
    type: prometheus
    uid: prometheus
    access: proxy
    url: %s
    jsonData:
      timeInterval: 1s
`, f.prom.URL())
	if err := os.WriteFile(filepath.Join(prov, "datasources", "prometheus.yaml"), []byte(ds), 0o644); err != nil {
		t.Fatal(err)
	}
	return grafana.ForTest(t, grafana.Config{
		PluginsDir: plugins, Provisioning: prov, Unsigned: []string{plugin.ID}, Dashboards: boardUIDs, Frontend: frontend,
		Env: []string{"BERM_CLICKHOUSE_DSN=" + f.dsn, "BERM_DASHBOARDS_DIR=" + boards},
	})
}

func findDash(t *testing.T, uid string) dash {
	t.Helper()
	for _, d := range loadAll(t) {
		if d.UID == uid {
			return d
		}
	}
	t.Fatalf("no dashboard %s", uid)
	return dash{}
}

// series is one series of a Prometheus panel's answer: its labels, display name and largest
// value (NaN and null skipped; -1 when it has none).
type series struct {
	labels  map[string]string
	display string
	max     float64
}

func seriesOf(frames []gFrame) []series {
	var out []series
	for _, fr := range frames {
		for i, fl := range fr.Schema.Fields {
			if i == 0 {
				continue
			}
			s := series{labels: fl.Labels, display: fl.Config.DisplayNameFromDS, max: -1}
			for _, v := range fr.Data.Values[i] {
				if x, ok := v.(float64); ok && x > s.max {
					s.max = x
				}
			}
			out = append(out, s)
		}
	}
	return out
}

var legendLabel = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)

// checkPrometheusPanels runs every Prometheus target of agent health through Grafana's
// /api/ds/query, the dashboard's variables expanded as the frontend does ($instance: bermd's
// address) and Grafana's own ($__rate_interval) left to Grafana, and checks each panel's
// series: the labels its legend uses, and values for what the calls did.
func (f *daemonFixture) checkPrometheusPanels(t *testing.T, g *grafana.Server) {
	d := findDash(t, "berm-agent")
	// the frontend's Prometheus datasource escapes a single-valued variable for a PromQL string
	// (prometheusRegularEscape: backslash doubled, quote escaped) before it sends the query
	promEscape := strings.NewReplacer(`\`, `\\`, `'`, `\'`)
	vars := map[string]string{"prometheus": "prometheus", "instance": promEscape.Replace(regexp.QuoteMeta(f.metrics))}
	positive := func(ss []series, label, value string) error {
		for _, s := range ss {
			if s.labels[label] == value && s.max > 0 {
				return nil
			}
		}
		return fmt.Errorf("no series with %s=%q above 0", label, value)
	}
	checks := map[string]func(legend string, ss []series) error{
		"Events by kind": func(_ string, ss []series) error {
			for _, k := range []string{"exec", "syscall", "approval", "dns"} {
				if err := positive(ss, "kind", k); err != nil {
					return err
				}
			}
			return nil
		},
		"Dropped events by where": func(_ string, ss []series) error {
			var where []string
			var most float64
			for _, s := range ss {
				where = append(where, s.labels["where"])
				most = max(most, s.max)
			}
			slices.Sort(where)
			if !slices.Equal(where, []string{"kernel", "user"}) {
				return fmt.Errorf("where %v, want kernel and user", where)
			}
			if f.floodDropped > 0 && most <= 0 {
				return fmt.Errorf("the flood's record dropped %d events, no series shows a drop", f.floodDropped)
			}
			return nil
		},
		"Ring buffer and queue usage": func(legend string, ss []series) error {
			if len(ss) != 1 || ss[0].labels["instance"] != f.metrics || ss[0].max < 0 || ss[0].max > 1 {
				return fmt.Errorf("want one series of bermd's instance with a share in [0, 1], have %+v", ss)
			}
			return nil
		},
		"Launches warm and cold": func(legend string, ss []series) error {
			if len(ss) != 1 || ss[0].max <= 0 {
				return fmt.Errorf("%s: want one series above 0 (a %s launch was made), have %+v", legend, legend, ss)
			}
			return nil
		},
		"Launch latency (p50, p99)": func(_ string, ss []series) error {
			for _, p := range []string{"connect", "prepare", "run"} {
				if err := positive(ss, "phase", p); err != nil {
					return err
				}
			}
			return nil
		},
		"Collector backlog": func(_ string, ss []series) error {
			if len(ss) != 1 || ss[0].labels["instance"] != f.metrics || ss[0].max < 0 {
				return fmt.Errorf("want one series of bermd's instance, have %+v", ss)
			}
			return nil
		},
		"Approvals pending": func(_ string, ss []series) error {
			if len(ss) != 1 || ss[0].max < 1 {
				return fmt.Errorf("want a series reaching 1 (a request pending until its timeout), have %+v", ss)
			}
			return nil
		},
		"Approval decisions by outcome": func(_ string, ss []series) error {
			for _, o := range []string{"denied", "approved", "timeout"} {
				if err := positive(ss, "outcome", o); err != nil {
					return err
				}
			}
			return nil
		},
		"Approval decision latency": func(legend string, ss []series) error {
			// two decisions through the API, both quick: a latency, and a share of 1 under 2 s
			if len(ss) != 1 || ss[0].max <= 0 {
				return fmt.Errorf("%s: want one series above 0, have %+v", legend, ss)
			}
			return nil
		},
		"DNS queries by verdict": func(_ string, ss []series) error {
			for _, v := range []string{"allowed", "refused"} {
				if err := positive(ss, "verdict", v); err != nil {
					return err
				}
			}
			return nil
		},
	}
	n := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			if tg.Datasource.Type != "prometheus" {
				continue
			}
			check, ok := checks[p.Title]
			if !ok {
				t.Errorf("panel %q: no check for it in this test", p.Title)
				continue
			}
			q := interpolate(t, tg.raw, vars).(map[string]any)
			q["datasource"] = map[string]any{"uid": "prometheus", "type": "prometheus"}
			frames, err := dsQuery(g, q, f.since, time.Now(), 1000)
			if err != nil {
				t.Errorf("%s %q through grafana: %v", p.Title, q["expr"], err)
				continue
			}
			legend, _ := q["legendFormat"].(string)
			ss := seriesOf(frames)
			if len(ss) == 0 {
				t.Errorf("%s %q: no series", p.Title, q["expr"])
				continue
			}
			for _, s := range ss {
				for _, m := range legendLabel.FindAllStringSubmatch(legend, -1) {
					if s.labels[m[1]] == "" {
						t.Errorf("%s: legend %q uses %s, a series has labels %v", p.Title, legend, m[1], s.labels)
					}
				}
				if strings.Contains(s.display, "{{") {
					t.Errorf("%s: display name %q", p.Title, s.display)
				}
			}
			if err := check(legend, ss); err != nil {
				t.Errorf("%s %q: %v", p.Title, q["expr"], err)
			}
			n++
		}
	}
	if n < 14 {
		t.Errorf("only %d Prometheus targets checked", n)
	}
	t.Logf("%d Prometheus panel queries through grafana", n)
}

// bermQueries are the berm targets of a dashboard, interpolated with vars.
func bermQueries(t *testing.T, d dash, vars map[string]string) map[string][]map[string]any {
	out := map[string][]map[string]any{}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			if tg.Datasource.Type == board.PluginID {
				q := interpolate(t, tg.raw, vars).(map[string]any)
				q["datasource"] = map[string]any{"uid": "berm", "type": plugin.ID}
				out[p.Title] = append(out[p.Title], q)
			}
		}
	}
	return out
}

// panel runs a panel's (first) berm query through Grafana.
func (f *daemonFixture) panel(t *testing.T, g *grafana.Server, uid, title string, vars map[string]string) []gFrame {
	t.Helper()
	qs := bermQueries(t, findDash(t, uid), vars)[title]
	if len(qs) == 0 {
		t.Fatalf("%s has no berm panel %q", uid, title)
	}
	fr, err := dsQuery(g, qs[0], f.since, time.Now().Add(time.Minute), 60000)
	if err != nil {
		t.Fatalf("%s/%s through grafana: %v", uid, title, err)
	}
	return fr
}

func (f *daemonFixture) vars(call string) map[string]string {
	return map[string]string{"datasource": "berm", "tenant": "*", "tool": "*", "host": "*", "surface": "*", "call": call,
		"prometheus": "prometheus", "instance": ".*"}
}

func (f *daemonFixture) checkApprovalDNSPanels(t *testing.T, g *grafana.Server) {
	// every berm panel of every dashboard answers, with the call picked either call
	for _, call := range []string{f.keys["approvals"], f.keys["dns"]} {
		for _, d := range loadAll(t) {
			for title, qs := range bermQueries(t, d, f.vars(call)) {
				for _, q := range qs {
					if _, err := dsQuery(g, q, f.since, time.Now().Add(time.Minute), 60000); err != nil {
						t.Errorf("%s/%s through grafana: %v", d.UID, title, err)
					}
				}
			}
		}
	}

	// the call timeline: the call's approvals, each request and its decision
	ap := f.panel(t, g, "berm-call", "Approvals", f.vars(f.keys["approvals"]))[0]
	outcomes := ap.col(t, "outcome")
	slices.Sort(outcomes)
	if want := []string{"approved", "denied", "requested", "requested", "requested", "timeout"}; !slices.Equal(outcomes, want) {
		t.Errorf("the call's approvals: outcomes %v, want %v", outcomes, want)
	}
	for i := range ap.rows() {
		r := ap.row(i)
		if r["action"] != "unlink" || r["rule"] != "delete-reports" || !strings.Contains(r["object"], "/reports/") {
			t.Errorf("approval row %v", r)
		}
		switch r["outcome"] {
		case "denied", "approved":
			if r["by"] != "reports-owner" || r["channel"] != "api" {
				t.Errorf("a decision through the API: %v", r)
			}
			if ms, _ := strconv.ParseFloat(r["latency_ms"], 64); ms <= 0 {
				t.Errorf("a decision without its latency: %v", r)
			}
		case "timeout":
			if ms, _ := strconv.ParseFloat(r["latency_ms"], 64); ms < 4000 {
				t.Errorf("a timeout before the policy's 4 s: %v", r)
			}
		}
	}
	if got := f.panel(t, g, "berm-call", "Approvals", f.vars(f.keys["dns"]))[0].rows(); got != 0 {
		t.Errorf("the dns call shows %d approvals", got)
	}

	// the call timeline: the call's DNS queries
	dq := f.panel(t, g, "berm-call", "DNS queries", f.vars(f.keys["dns"]))[0]
	byName := map[string]map[string]string{}
	for i := range dq.rows() {
		r := dq.row(i)
		if r["type"] == "A" {
			byName[r["name"]] = r
		}
	}
	for name, want := range map[string]string{
		"allowed.test":                             "A NOERROR allowed 127.0.0.21",
		"denied.test":                              "A REFUSED refused ",
		strings.Repeat("a", 55) + ".t.evil.test":   "A REFUSED refused ",
		strings.ToLower(plantedDNS) + ".evil.test": "A REFUSED refused ",
	} {
		r := byName[name]
		if got := fmt.Sprintf("%s %s %s %s", r["type"], r["rcode"], r["verdict"], r["answers"]); got != want {
			t.Errorf("DNS row of %q: %q, want %q (rows %v)", name, got, want, byName)
		}
	}

	// escape detection: the egress DNS rows, refusals, tunnelling alerts, approval refusals
	eg := f.panel(t, g, "berm-escape", "Egress: DNS queries", f.vars(""))[0]
	if names := eg.col(t, "name"); !slices.Contains(names, "allowed.test") || !slices.Contains(names, "denied.test") {
		t.Errorf("egress DNS queries: %v", names)
	}
	rf := f.panel(t, g, "berm-escape", "DNS refusals", f.vars(""))[0]
	if names := rf.col(t, "name"); slices.Contains(names, "allowed.test") || !slices.Contains(names, "denied.test") {
		t.Errorf("DNS refusals: %v", names)
	}
	al := f.panel(t, g, "berm-escape", "DNS tunnelling alerts", f.vars(""))[0]
	if rules := al.col(t, "rule"); !slices.Contains(rules, "dns-tunnel-long-label") {
		t.Errorf("DNS tunnelling alerts: %v", rules)
	}
	names := func(frames []gFrame) []string {
		var out []string
		for _, s := range seriesOf(frames) {
			out = append(out, s.display)
		}
		slices.Sort(out)
		return out
	}
	if got := names(f.panel(t, g, "berm-escape", "Approval refusals", f.vars(""))); !slices.Equal(got, []string{"denied", "timeout"}) {
		t.Errorf("approval refusals: series %v, want denied and timeout", got)
	}
	if got := names(f.panel(t, g, "berm-escape", "Egress: DNS queries by verdict", f.vars(""))); !slices.Equal(got, []string{"allowed", "refused"}) {
		t.Errorf("DNS queries by verdict: series %v", got)
	}
}

// checkMatrixHosts: the matrix with several hosts selected (or All) answers, a row per tool
// of those hosts.
func (f *daemonFixture) checkMatrixHosts(t *testing.T, g *grafana.Server) {
	tools := func(host string) []string {
		v := f.vars("")
		v["host"] = host
		got := f.panel(t, g, "berm-matrix", "Tools × surfaces", v)[0].col(t, "tool")
		slices.Sort(got)
		return got
	}
	here := []string{"cleaner", "fetcher", "flooder", "shell"}
	both := append(slices.Clone(here), "remote")
	slices.Sort(both)
	for host, want := range map[string][]string{
		f.host + "," + f.otherHost: both,
		"*":                        both,
		f.otherHost:                {"remote"},
		f.host:                     here,
	} {
		if got := tools(host); !slices.Equal(got, want) {
			t.Errorf("matrix of host %q: tools %v, want %v", host, got, want)
		}
	}
	v := f.vars("")
	v["host"] = f.host + "," + f.otherHost
	m := f.panel(t, g, "berm-matrix", "Tools × surfaces", v)[0]
	for i := range m.rows() {
		if r := m.row(i); r["tool"] == "cleaner" && !strings.HasPrefix(r["approval"], "violated") {
			t.Errorf("the cleaner's approval surface after a deny and a timeout: %q", r["approval"])
		}
	}
}
