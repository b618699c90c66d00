package dashboards

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"image"
	"image/color/palette"
	"image/draw"
	"image/png"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/bermsec/berm/collector/query"
	"github.com/bermsec/berm/testenv/bermbin"
	chtest "github.com/bermsec/berm/testenv/clickhouse"
	"github.com/bermsec/berm/testenv/dnstest"
	"github.com/bermsec/berm/testenv/grafana"
	"github.com/bermsec/berm/testenv/npmci"
	promtest "github.com/bermsec/berm/testenv/prometheus"
	"github.com/bermsec/berm/testenv/testutil"
)

var screenshots = flag.String("screenshots", "", "write the dashboards' screenshots into this directory (make screenshots: dashboards/docs)")

// browserPackages are browsertest's locked packages: puppeteer-core, which downloads no browser.
var browserPackages = npmci.Packages{Dir: "browsertest", Name: "browsertest", CacheEnv: "BERM_BROWSER_CACHE", Env: []string{"PUPPETEER_SKIP_DOWNLOAD=1"}}

// browserFixture: a real bermd shipping to a real ClickHouse, scraped by a real Prometheus,
// after real calls through it: a benign one, a denied write, an escape (the escape-unshare
// rule's alert) and a wall-time cap.
func newBrowserFixture(t *testing.T) *daemonFixture {
	t.Helper()
	bermbin.RequireRoot(t)
	f := &daemonFixture{since: time.Now().Add(-time.Minute), keys: map[string]string{}, log: &bytes.Buffer{}}
	f.host, _ = os.Hostname()
	f.ch = chtest.ForTest(t, chtest.Config{})
	f.dsn = f.ch.DSN("berm")
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{f.ch.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.Exec(t.Context(), "CREATE DATABASE IF NOT EXISTS berm"); err != nil {
		t.Fatal(err)
	}
	up := dnstest.Start(t, dnstest.Zone{})
	f.startBermd(t, up.Addr)
	f.prom = promtest.ForTest(t, promtest.Config{Targets: []string{f.metrics}})
	if _, err := f.prom.Wait(`up{job="berm"}`, time.Minute, func(s []promtest.Sample) bool { return len(s) == 1 && s[0].Value == 1 }); err != nil {
		t.Fatal(err)
	}
	f.settled(t)
	// bermd idle for a few scrapes: nothing in its ring buffer or queue
	f.idleFrom = time.Now()
	time.Sleep(6 * time.Second)
	f.idleTo = time.Now()
	run := func(id, tool string, args, argv []string) {
		r := f.start(t, id, append(append([]string{"--tenant", browserTenant, "--tool", tool}, args...), append([]string{"--"}, argv...)...)...)()
		if r.Exit >= 125 && id != "browser-limit" {
			t.Fatalf("call %s: exit %d\nstdout: %s\nstderr: %s", id, r.Exit, r.Stdout, r.Stderr)
		}
	}
	for _, c := range browserCalls {
		run(c.id, c.tool, c.args, c.argv)
	}
	firstRound := time.Now()
	// a flood of events past the call's budget: events lost, the trail incomplete, observability
	// degraded (with its reason)
	ws := bermbin.Workspace(t)
	build := exec.Command("go", "build", "-o", filepath.Join(ws, "sysloop"), "./testenv/bench/sysloop")
	build.Dir = bermbin.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build sysloop: %v\n%s", err, out)
	}
	pol := filepath.Join(t.TempDir(), "flood.yaml")
	os.WriteFile(pol, []byte("apiVersion: berm.dev/v1alpha1\nkind: ToolPolicy\nmetadata: {name: flood}\nspec:\n  filesystem:\n    exec: [\"${WORKSPACE}\", /bin, /lib, /lib64, /usr/bin, /usr/lib, /usr/lib64]\n"), 0o644)
	f.mustRun(t, 0, "browser-flood", "--tenant", browserTenant, "--tool", "browser-flooder", "--workspace", ws, "--policy", pol, "--trace-syscall", "getppid",
		"--", "/bin/sh", "-c", `end=$(($(date +%s) + 3)); while [ $(date +%s) -lt $end ]; do ./sysloop 1000000 >/dev/null || exit; done`)
	for _, c := range bermbin.Calls(t, f.state) {
		if c.Start.CallID == "browser-flood" {
			f.floodDropped = c.Record.Dropped.Kernel + c.Record.Dropped.User
			t.Logf("flood: %d events, dropped %+v, complete %v", c.Record.Events, c.Record.Dropped, c.Record.Complete)
		}
	}
	// The denial and the alert again, two of the dashboards' steps after the first round (a
	// step is at most a hundredth of the range the test opens: from 4 minutes before f.since
	// to a minute after the end), so the bar panels have two points to measure their bars'
	// step by however fast the first round ran (a loaded run had them in one step).
	span := time.Since(f.since) + 6*time.Minute
	if wait := 2*span/100 - time.Since(firstRound); wait > 0 {
		time.Sleep(wait)
	}
	for _, c := range browserCalls {
		if c.id == "browser-denial" || c.id == "browser-alert" {
			run(c.id+"-again", c.tool, c.args, c.argv)
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var n uint64
		if err := conn.QueryRow(t.Context(), "SELECT count() FROM (SELECT DISTINCT call_key FROM berm.calls)").Scan(&n); err == nil && n >= uint64(f.calls) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ClickHouse has %d of %d call records after 2 minutes\n%s", n, f.calls, f.log)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := f.prom.Wait(`sum(berm_calls_total)`, time.Minute, func(s []promtest.Sample) bool {
		return len(s) == 1 && int(s[0].Value) >= f.calls
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // a few more scrapes, so every rate has its points
	return f
}

const browserTenant = "browser-acme"

var browserCalls = []struct {
	id, tool   string
	args, argv []string
}{
	{"browser-benign", "browser-shell", nil, []string{"/bin/sh", "-c", "echo hello; cat /etc/hostname >/dev/null"}},
	// the built-in policy refuses writes outside the workspace and /tmp (Landlock)
	{"browser-denial", "browser-writer", nil, []string{"/bin/sh", "-c", "echo x > /etc/berm-browser-denied; true"}},
	// new namespaces inside the call: the escape-unshare rule's alert
	{"browser-alert", "browser-escaper", nil, []string{"/usr/bin/unshare", "--user", "--map-root-user", "/bin/true"}},
	// the wall-time cap ends it
	{"browser-limit", "browser-sleeper", []string{"--timeout", "1s"}, []string{"/bin/sleep", "30"}},
}

// browserReport is what browsertest/browse.js saw.
type browserReport struct {
	Fatal  string        `json:"fatal"`
	Login  pageActivity  `json:"login"`
	Pages  []browserPage `json:"pages"`
	Editor []struct {
		pageActivity
		Type   string   `json:"type"`
		Typed  []string `json:"typed"`
		Fields []string `json:"fields"`
		Alerts []string `json:"alerts"`
	} `json:"editor"`
	Config struct {
		pageActivity
		Labels []struct {
			For          string  `json:"for"`
			Text         string  `json:"text"`
			ScrollWidth  int     `json:"scrollWidth"`
			ClientWidth  int     `json:"clientWidth"`
			ScrollHeight int     `json:"scrollHeight"`
			ClientHeight int     `json:"clientHeight"`
			Spill        float64 `json:"spill"`
		} `json:"labels"`
		DSN   string `json:"dsn"`
		Alert string `json:"alert"`
	} `json:"config"`
}

type pageActivity struct {
	Console []struct {
		Text  string   `json:"text"`
		Where []string `json:"where"`
	} `json:"console"`
	Failed []struct {
		URL   string `json:"url"`
		Error string `json:"error"`
		Body  string `json:"body"`
	} `json:"failed"`
	HTTP []struct {
		URL    string `json:"url"`
		Status int    `json:"status"`
		Body   string `json:"body"`
	} `json:"http"`
	Queries []struct {
		Status  int              `json:"status"`
		Queries []map[string]any `json:"queries"`
		Results map[string]struct {
			Error   string `json:"error"`
			Notices []struct {
				Severity string `json:"severity"`
				Text     string `json:"text"`
			} `json:"notices"`
			Rows      int      `json:"rows"`
			Setup     int      `json:"setup"`
			Titles    []string `json:"titles"`
			QueryType string   `json:"queryType"`
		} `json:"results"`
	} `json:"queries"`
}

type browserPage struct {
	pageActivity
	Name   string `json:"name"`
	URL    string `json:"url"`
	Panels []struct {
		Title  string `json:"title"`
		Status string `json:"status"`
		NoData bool   `json:"noData"`
		Text   string `json:"text"`
		Plots  []struct {
			Found     bool     `json:"found"`
			Points    int      `json:"points"`
			Width     float64  `json:"width"`
			MinStepPx *float64 `json:"minStepPx"`
			Scales    map[string]struct {
				Min *float64 `json:"min"`
				Max *float64 `json:"max"`
			} `json:"scales"`
			Series []struct {
				Label  string   `json:"label"`
				Scale  string   `json:"scale"`
				Max    *float64 `json:"max"`
				Points int      `json:"points"`
			} `json:"series"`
		} `json:"plots"`
	} `json:"panels"`
	Toasts []string `json:"toasts"`
	Links  []struct {
		Href string `json:"href"`
		Text string `json:"text"`
	} `json:"links"`
	Variables []struct {
		Name    string   `json:"name"`
		Picker  bool     `json:"picker"`
		Current string   `json:"current"`
		Options []string `json:"options"`
	} `json:"variables"`
}

// activity fails the test on what a page did wrong: a console error from berm's plugin, a
// failed or aborted request, an answer >= 400, a datasource query's error or warning notice.
func (a *pageActivity) check(t *testing.T, where string) {
	t.Helper()
	for _, c := range a.Console {
		gnet := slices.ContainsFunc(c.Where, func(w string) bool { return strings.Contains(w, "/api/gnet/") })
		if !gnet && (strings.Contains(c.Text, "berm") || slices.ContainsFunc(c.Where, func(w string) bool { return strings.Contains(w, "berm-datasource") })) {
			t.Errorf("%s: console error from berm's plugin: %s (at %v)", where, c.Text, c.Where)
		} else {
			t.Logf("%s: console error (not berm's): %s", where, c.Text)
		}
	}
	for _, f := range a.Failed {
		if u, err := url.Parse(f.URL); err == nil && u.Hostname() != "127.0.0.1" && u.Hostname() != "localhost" {
			// Grafana's own reach to the internet (its home dashboard's grafana.com news feed),
			// which a test machine need not have: neither Grafana's server nor berm's plugin
			t.Logf("%s: request to the internet failed (not berm's): %s %s", where, f.URL, f.Error)
			continue
		}
		t.Errorf("%s: request failed: %s %s %s", where, f.URL, f.Error, f.Body)
	}
	for _, h := range a.HTTP {
		if strings.Contains(h.URL, "/api/gnet/") {
			continue // Grafana asking grafana.com about the plugin: not reachable from a test
		}
		t.Errorf("%s: answer %d: %s %s", where, h.Status, h.URL, h.Body)
	}
	for _, q := range a.Queries {
		for ref, r := range q.Results {
			if r.Error != "" {
				t.Errorf("%s: query %s: %s (sent %v)", where, ref, r.Error, q.Queries)
			}
			for _, n := range r.Notices {
				if n.Severity == "warning" || n.Severity == "error" {
					t.Errorf("%s: query %s: %s notice: %s", where, ref, n.Severity, n.Text)
				}
			}
		}
	}
}

// TestDashboardsInABrowser opens berm's four dashboards in headless Chromium (the system's,
// driven by puppeteer-core) served by a real Grafana with its real web frontend, after real
// calls in ClickHouse; and the plugin's query editor (each query type) and config page (Save
// & test). It fails on what on-call would see wrong: an error or warning on a panel, "No data"
// where the test made data, a variable without options, a failed or aborted request, a console
// error from berm's plugin, a panel lacking what the calls did.
func TestDashboardsInABrowser(t *testing.T) {
	bermbin.RequireRoot(t)
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		testutil.Unavailable(t, "chromium is not installed: the dashboards are not opened in a browser (testenv/install-deps.sh installs it)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		testutil.Unavailable(t, "node is not installed (testenv/install-deps.sh installs nodejs)")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		testutil.Unavailable(t, "npm is not installed (testenv/install-deps.sh installs it)")
	}
	modules := npmci.Install(t, npm, browserPackages)
	// the frontend's build is minutes the first time: before the fixture's servers start
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Minute)
	if _, err := grafana.Frontend(ctx); err != nil {
		cancel()
		testutil.Unavailable(t, "grafana's web frontend cannot be built: %v", err)
	}
	cancel()

	f := newBrowserFixture(t)
	g := f.grafanaWith(t, true)

	from, to := f.since.Add(-4*time.Minute).UnixMilli(), time.Now().Add(time.Minute).UnixMilli()
	rng := fmt.Sprintf("orgId=1&from=%d&to=%d", from, to)
	denial := f.keys["browser-denial"]
	rawShots := t.TempDir()
	shot := func(name string) string { return filepath.Join(rawShots, name) }
	explore, _ := json.Marshal(map[string]any{"datasource": "berm", "queries": []any{map[string]any{"refId": "A", "datasource": map[string]string{"type": "berm-datasource", "uid": "berm"}}},
		"range": map[string]string{"from": fmt.Sprint(from), "to": fmt.Sprint(to)}})
	var types []map[string]any
	for _, qt := range query.Types() {
		types = append(types, map[string]any{"type": qt[0], "fields": map[string]string{"call": denial, "tenant": browserTenant, "field": "tool"}})
	}
	spec := map[string]any{
		"base": g.URL(), "user": g.User, "password": g.Password, "chromium": chromium,
		"pages": []map[string]any{
			{"name": "matrix", "path": "/d/berm-matrix?" + rng, "screenshot": shot("tools-surfaces.png"), "variables": true},
			{"name": "escape", "path": "/d/berm-escape?" + rng, "screenshot": shot("escape-detection.png"), "variables": true},
			{"name": "call", "path": "/d/berm-call?" + rng + "&var-call=" + url.QueryEscape(denial), "screenshot": shot("call-timeline.png"), "variables": true},
			// a call id, as berm run and the agent's logs give it, not only the call key
			{"name": "call-by-id", "path": "/d/berm-call?" + rng + "&var-call=browser-denial"},
			{"name": "agent-idle", "path": fmt.Sprintf("/d/berm-agent?orgId=1&from=%d&to=%d", f.idleFrom.UnixMilli(), f.idleTo.UnixMilli())},
			{"name": "agent", "path": "/d/berm-agent?" + rng, "screenshot": shot("agent-health.png"), "variables": true},
		},
		"editor": map[string]any{"path": "/explore?orgId=1&left=" + url.QueryEscape(string(explore)), "types": types},
		"config": map[string]any{"path": "/connections/datasources/edit/berm"},
	}
	dir := t.TempDir()
	specFile, reportFile := filepath.Join(dir, "spec.json"), filepath.Join(dir, "report.json")
	b, _ := json.Marshal(spec)
	if err := os.WriteFile(specFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs("browsertest/browse.js")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	bctx, bcancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer bcancel()
	cmd := exec.CommandContext(bctx, node, script, specFile, reportFile)
	cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(modules, "node_modules"))
	out, err := cmd.CombinedOutput()
	t.Logf("browse.js: %v in %v\n%s", err, time.Since(start).Round(time.Second), out)
	rb, rerr := os.ReadFile(reportFile)
	if rerr != nil {
		t.Fatalf("browse.js wrote no report: %v", rerr)
	}
	var rep browserReport
	if err := json.Unmarshal(rb, &rep); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("BERM_BROWSER_REPORT") != "" {
		os.WriteFile(os.Getenv("BERM_BROWSER_REPORT"), rb, 0o644)
	}
	if rep.Fatal != "" {
		t.Fatalf("browse.js: %s\n%s", rep.Fatal, g.LogTail())
	}
	rep.Login.check(t, "login")
	if *screenshots != "" {
		for _, name := range []string{"tools-surfaces.png", "escape-detection.png", "call-timeline.png", "agent-health.png"} {
			if err := shrinkPNG(shot(name), filepath.Join(*screenshots, name)); err != nil {
				t.Errorf("screenshot %s: %v", name, err)
			}
		}
	}
	pages := map[string]browserPage{}
	for _, p := range rep.Pages {
		pages[p.Name] = p
	}
	for _, tc := range browserPageCases(f) {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := pages[tc.page]
			if !ok {
				t.Fatalf("page %s not opened", tc.page)
			}
			tc.check(t, p)
		})
	}
	t.Run("query editor runs each query type", func(t *testing.T) {
		if len(rep.Editor) != len(types) {
			t.Errorf("%d query types run in the editor, want %d", len(rep.Editor), len(types))
		}
		for _, e := range rep.Editor {
			e.check(t, "editor "+e.Type)
			if len(e.Queries) == 0 {
				t.Errorf("editor %s: choosing it ran no query", e.Type)
			}
			for _, a := range e.Alerts {
				if strings.HasPrefix(a, "Query error") { // Explore keeps a hidden "Unknown error" alert
					t.Errorf("editor %s: %s", e.Type, a)
				}
			}
		}
	})
	t.Run("config page saves and tests", func(t *testing.T) {
		c := rep.Config
		c.check(t, "config")
		if c.DSN != f.dsn {
			t.Errorf("the config page shows DSN %q, provisioned %q", c.DSN, f.dsn)
		}
		if !strings.Contains(c.Alert, "schema version") {
			t.Errorf("Save & test: %q, want the health check's schema version", c.Alert)
		}
		if len(c.Labels) < 4 {
			t.Errorf("config page labels: %+v", c.Labels)
		}
		for _, l := range c.Labels {
			if l.Spill > 0.5 || l.ScrollWidth > l.ClientWidth || l.ScrollHeight > l.ClientHeight {
				t.Errorf("config page: the label %q spills out of its box by %.1f px (%d×%d px of content in %d×%d)", l.Text, l.Spill,
					l.ScrollWidth, l.ScrollHeight, l.ClientWidth, l.ClientHeight)
			}
		}
	})
	if t.Failed() {
		t.Logf("grafana log:\n%s", g.LogTail())
	}
}

type pageCase struct {
	name, page string
	check      func(*testing.T, browserPage)
}

// panel is the report's panel of that title.
func (p *browserPage) panel(t *testing.T, title string) int {
	t.Helper()
	for i, pn := range p.Panels {
		if pn.Title == title {
			return i
		}
	}
	var titles []string
	for _, pn := range p.Panels {
		titles = append(titles, pn.Title)
	}
	t.Fatalf("%s: no panel %q (has %q)", p.Name, title, titles)
	return -1
}

// common: what every dashboard must show right.
func (p *browserPage) common(t *testing.T, emptyOK []string) {
	t.Helper()
	p.check(t, p.Name)
	if len(p.Panels) == 0 {
		t.Fatalf("%s: no panel rendered (%s)", p.Name, p.URL)
	}
	p.links(t)
	for _, m := range p.Toasts {
		t.Errorf("%s: Grafana shows an error: %s", p.Name, m)
	}
	for _, pn := range p.Panels {
		if pn.Status != "" {
			t.Errorf("%s: panel %q shows an error: %s", p.Name, pn.Title, pn.Status)
		}
		if pn.NoData && !slices.Contains(emptyOK, pn.Title) {
			t.Errorf("%s: panel %q shows No data, the test made its data", p.Name, pn.Title)
		}
	}
	for _, v := range p.Variables {
		if v.Picker && len(slices.DeleteFunc(slices.Clone(v.Options), func(o string) bool { return o == "All" })) == 0 {
			t.Errorf("%s: variable %s has no options (shows %q)", p.Name, v.Name, v.Current)
		}
	}
}

// links fails when a link to another of berm's dashboards loses the time range or the
// variables: on-call following it would land on another window of time, or other tenants.
func (p *browserPage) links(t *testing.T) {
	t.Helper()
	if len(p.Links) == 0 {
		t.Errorf("%s: no link to berm's dashboards", p.Name)
	}
	for _, l := range p.Links {
		for _, want := range []string{"from=", "to=", "var-datasource=", "var-tenant="} {
			if !strings.Contains(l.Href, want) {
				t.Errorf("%s: the link %q (%s) lacks %s", p.Name, l.Text, l.Href, want)
			}
		}
	}
}

func (p *browserPage) text(t *testing.T, title string, want ...string) {
	t.Helper()
	p.panel(t, title)
	var text []string // every panel of the title (the matrix has a stat and a table called Calls)
	for _, pn := range p.Panels {
		if pn.Title == title {
			text = append(text, pn.Text)
		}
	}
	all := strings.Join(text, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("%s: panel %q lacks %q: %s", p.Name, title, w, all)
		}
	}
}

// usageAxis fails when the ring buffer and queue usage panel's axis runs past 100 %; idle: every
// series must be 0 (bermd idle: where Grafana's automatic axis ran to 10000 %).
func (p *browserPage) usageAxis(t *testing.T, idle bool) {
	t.Helper()
	pn := p.Panels[p.panel(t, "Ring buffer and queue usage")]
	if len(pn.Plots) == 0 || !pn.Plots[0].Found {
		t.Fatalf("%s: the usage panel drew no plot: %+v", p.Name, pn)
	}
	pl := pn.Plots[0]
	if len(pl.Series) == 0 {
		t.Fatalf("%s: the usage panel has no series", p.Name)
	}
	for _, s := range pl.Series {
		if s.Points == 0 {
			t.Errorf("%s: usage series %s has no points", p.Name, s.Label)
		}
		if idle && (s.Max == nil || *s.Max != 0) {
			t.Errorf("%s: usage series %s is not 0 while bermd was idle: max %v", p.Name, s.Label, s.Max)
		}
		sc, ok := pl.Scales[s.Scale]
		if !ok || sc.Max == nil {
			t.Errorf("%s: the usage panel's series %s has no axis", p.Name, s.Label)
		} else if *sc.Max > 1 {
			t.Errorf("%s: the usage panel's axis runs to %g (of 1 = 100 %%)", p.Name, *sc.Max)
		}
	}
}

// bars fails when a bar panel's bars are hairlines: fewer than 4 px between adjacent steps.
func (p *browserPage) bars(t *testing.T, title string) {
	t.Helper()
	pn := p.Panels[p.panel(t, title)]
	if len(pn.Plots) == 0 || !pn.Plots[0].Found {
		t.Fatalf("%s: panel %q drew no plot: %+v", p.Name, title, pn)
	}
	pl := pn.Plots[0]
	if pl.MinStepPx == nil {
		t.Fatalf("%s: panel %q has %d points: no step to measure", p.Name, title, pl.Points)
	}
	if *pl.MinStepPx < 4 {
		t.Errorf("%s: panel %q draws hairline bars: %.1f px a step (%d points over %.0f px)", p.Name, title, *pl.MinStepPx, pl.Points, pl.Width)
	}
}

func browserPageCases(f *daemonFixture) []pageCase {
	return []pageCase{
		{"tools × surfaces shows the denied tool", "matrix", func(t *testing.T, p browserPage) {
			p.common(t, nil)
			p.text(t, "Tools × surfaces", "browser-writer", "browser-escaper")
			p.text(t, "Calls", "browser-denial")
			p.bars(t, "Violations over time by surface")
			// the flood lost events: its observability is degraded, and the cell says why
			if f.floodDropped > 0 {
				p.text(t, "Tools × surfaces", "browser-flooder", "degraded: events were lost")
			} else {
				t.Logf("the flood lost no events: no degraded surface to show")
			}
		}},
		{"escape detection shows the alert's rule", "escape", func(t *testing.T, p browserPage) {
			// the calls made no DNS queries, approvals or egress
			p.common(t, []string{"Egress denials", "Egress: DNS queries", "Egress: DNS queries by verdict", "Approval refusals", "DNS refusals", "DNS tunnelling alerts"})
			p.text(t, "Top rules", "escape-unshare")
			p.text(t, "Alerts", "escape-unshare", "browser-escaper")
			p.bars(t, "Alerts by rule")
			p.bars(t, "Alerts by severity")
		}},
		{"the call timeline shows the call's denial", "call", func(t *testing.T, p browserPage) {
			p.common(t, []string{"Network", "Alerts", "Approvals", "DNS queries"})
			p.text(t, "Summary", "browser-denial")
			p.text(t, "Denials", "/etc/berm-browser-denied")
			// berm's own set-up is hidden, as berm timeline hides it
			n := 0
			for _, q := range p.Queries {
				for _, r := range q.Results {
					if r.QueryType == "timeline" || r.QueryType == "process_tree" {
						n++
						if r.Setup > 0 {
							t.Errorf("call: the %s panel shows %d events of berm-init's set-up", r.QueryType, r.Setup)
						}
						for _, title := range r.Titles {
							if strings.Contains(title, "berm-init") {
								t.Errorf("call: the %s panel shows berm-init: %q", r.QueryType, title)
							}
						}
					}
				}
			}
			if n < 2 {
				t.Errorf("call: %d timeline and process tree answers seen, want both", n)
			}
		}},
		{"the call timeline opens from a call id", "call-by-id", func(t *testing.T, p browserPage) {
			p.common(t, []string{"Network", "Alerts", "Approvals", "DNS queries"})
			p.text(t, "Summary", "browser-denial", f.keys["browser-denial"])
			p.text(t, "Denials", "/etc/berm-browser-denied")
		}},
		{"agent health's usage axis ends at 100 % when nothing waited", "agent-idle", func(t *testing.T, p browserPage) {
			p.check(t, p.Name)
			p.usageAxis(t, true)
		}},
		{"agent health shows bermd's launches", "agent", func(t *testing.T, p browserPage) {
			p.common(t, []string{"Approvals pending", "Approval decisions by outcome", "Approval decision latency", "DNS queries by verdict", "Incomplete calls", "Dropped events by where",
				"Backlog: calls without a record"}) // every call's record was shipped
			p.usageAxis(t, false)
		}},
	}
}

// shrinkPNG rewrites a screenshot with a 256-colour palette (Plan 9's, nearest colour, no
// dithering) at the best compression: a dashboard's flat dark theme loses little, and the
// repository keeps a few hundred KB, not megabytes.
func shrinkPNG(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	img, err := png.Decode(in)
	if err != nil {
		return fmt.Errorf("decode %s: %w", from, err)
	}
	pal := image.NewPaletted(img.Bounds(), palette.Plan9)
	draw.Draw(pal, img.Bounds(), img, img.Bounds().Min, draw.Src)
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	enc := png.Encoder{CompressionLevel: png.BestCompression}
	if err := enc.Encode(out, pal); err != nil {
		out.Close()
		return fmt.Errorf("encode %s: %w", to, err)
	}
	return out.Close()
}
