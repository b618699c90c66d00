package board

import (
	"fmt"

	"github.com/bermsec/berm/agent/event"
)

// stateColours are the colours of a surface's state, worst red.
var stateColours = []struct{ pattern, colour, text string }{
	{"^violated.*", "red", ""},
	{"^absent$", "#6e6e6e", "absent"},
	{"^degraded.*", "orange", "degraded"}, // with its reasons: "degraded: events were lost: ..."
	{"^audit$", "yellow", "audit"},
	{"^enforced.*", "green", ""}, // "enforced (inject)": the calls' secrets stayed outside them
}

func stateMappings() []any {
	var out []any
	for i, s := range stateColours {
		res := obj{"color": s.colour, "index": i}
		out = append(out, obj{"type": "regex", "options": obj{"pattern": s.pattern, "result": res}})
	}
	return out
}

// stat is a count of the calls in the range. With alarm "", it is information (blue);
// otherwise any at all is bad: green at 0, alarm's colour from 1.
func stat(d *Dashboard, title, desc, field, alarm string) {
	fc := obj{"defaults": obj{"unit": "short", "color": obj{"mode": "fixed", "fixedColor": "blue"}}, "overrides": []any{}}
	if alarm != "" {
		fc = alarmAt(obj{"defaults": obj{"unit": "short", "color": obj{"mode": "thresholds"}}, "overrides": []any{}}, 1, alarm, "")
	}
	d.add("stat", title, desc, 6, 4, []obj{berm("stats", scope(obj{"surface": "${surface}"}))}, fc,
		obj{"reduceOptions": obj{"values": false, "calcs": []string{"lastNotNull"}, "fields": "/^" + field + "$/"},
			"colorMode": "value", "graphMode": "none", "textMode": "value", "justifyMode": "auto", "orientation": "auto"})
}

// alarmAt sets fc's thresholds: green below at, colour from it; style ("line", "area" or "")
// is how a time series draws them.
func alarmAt(fc obj, at float64, colour, style string) obj {
	def := fc["defaults"].(obj)
	def["thresholds"] = obj{"mode": "absolute", "steps": []any{obj{"color": "green", "value": nil}, obj{"color": colour, "value": at}}}
	if style != "" {
		if def["custom"] == nil {
			def["custom"] = obj{}
		}
		def["custom"].(obj)["thresholdsStyle"] = obj{"mode": style}
	}
	return fc
}

func callsTable(d *Dashboard, title, desc string, w, h int, fields obj) {
	d.add("table", title, desc, w, h, []obj{berm("calls", scope(fields))},
		obj{"defaults": obj{}, "overrides": []any{
			override("byName", "call_id", prop("links", []any{callLink("call_key")})),
			override("byName", "call_key", prop("custom.hidden", true)),
		}}, obj{"showHeader": true})
}

// Matrix is the on-call home: the tools × surfaces matrix and what feeds it.
func Matrix() *Dashboard {
	d := &Dashboard{File: "tools-surfaces.json", UID: "berm-matrix", Title: "berm / Tools × surfaces",
		Description: "Each tool's calls on the six surfaces: the worst state in the range, violations counted.",
		Tags:        []string{"berm"}, Vars: bermVars()}
	stat(d, "Calls", "Calls that ended in the range.", "calls", "")
	stat(d, "Calls with violations", "Calls with a denial, an alert or a limit hit.", "calls_with_violations", "red")
	stat(d, "Incomplete records", "Calls whose trail misses events (complete = false).", "incomplete", "orange")
	stat(d, "Dropped events", "Events lost in the ring buffer or the agent's queue, and DNS queries the kernel dropped at the call's resolver, counted per call.", "dropped_events", "orange")
	var overrides []any
	for _, s := range event.Surfaces {
		overrides = append(overrides, override("byName", s,
			prop("custom.cellOptions", obj{"type": "color-background"}),
			prop("mappings", stateMappings()),
			prop("links", []any{obj{"title": "calls of this tool violating " + s,
				"url": "/d/berm-matrix/berm-tools-x-surfaces?var-datasource=${datasource}&${tenant:queryparam}&var-tool=${__data.fields.tool:percentencode}&var-surface=" + s + "&${host:queryparam}&${__url_time_range}"}})))
	}
	overrides = append(overrides, override("byRegexp", "/ violations$/", prop("custom.hidden", true)))
	d.add("table", "Tools × surfaces", "A row per tool, a column per surface: violated (with the count), absent (nothing configured or enforced), degraded (configured, not fully working: e.g. an incomplete trail), audit (recorded, not blocked), enforced. A cell links to the calls behind it.",
		24, 9, []obj{berm("matrix", scope(nil))},
		obj{"defaults": obj{"custom": obj{"align": "center"}}, "overrides": overrides}, obj{"showHeader": true})
	bars(d.add("timeseries", "Violations over time by surface", "Denials, alerts and limit hits per step.", 12, 8,
		[]obj{berm("violations_over_time", scope(obj{"surface": "${surface}"}))},
		obj{"defaults": obj{"unit": "short", "custom": obj{"drawStyle": "bars", "stacking": obj{"mode": "normal", "group": "A"}, "fillOpacity": 80}}, "overrides": []any{}}, nil))
	d.add("bargauge", "Top violating tools", "Tools by denials, alerts and limit hits in the range.", 12, 8,
		[]obj{berm("top_tools", scope(obj{"surface": "${surface}", "limit": 10}))},
		obj{"defaults": obj{"unit": "short", "color": obj{"mode": "fixed", "fixedColor": "red"}}, "overrides": []any{}},
		obj{"reduceOptions": obj{"values": true, "calcs": []string{}, "fields": "/^violations$/"}, "orientation": "horizontal", "displayMode": "basic",
			"valueMode": "color", "namePlacement": "auto", "showUnfilled": true, "sizing": "auto", "minVizWidth": 8, "minVizHeight": 16, "maxVizHeight": 300,
			"legend": obj{"displayMode": "list", "placement": "bottom", "showLegend": false, "calcs": []string{}}})
	callsTable(d, "Calls", "The calls of the selected tools (a matrix cell sets tool and surface: the calls violating it).", 24, 10,
		obj{"surface": "${surface}", "limit": 500})
	return d
}

// bars gives a bar panel at most 100 steps in its range: at Grafana's default (one step per
// pixel, rounded) a short range has 1–2 s steps, and bars a pixel wide.
func bars(p obj) {
	p["maxDataPoints"] = 100
}

// Escape is the security team's view: what the detection rules found.
func Escape() *Dashboard {
	d := &Dashboard{File: "escape-detection.json", UID: "berm-escape", Title: "berm / Escape detection",
		Description: "Alerts of the detection rules, first-seen binaries, escape syscalls and egress denials.",
		Tags:        []string{"berm"}, Vars: bermVars()}
	series := obj{"defaults": obj{"unit": "short", "custom": obj{"drawStyle": "bars", "stacking": obj{"mode": "normal", "group": "A"}, "fillOpacity": 80}}, "overrides": []any{}}
	bars(d.add("timeseries", "Alerts by rule", "Alerts per step, a series per rule.", 12, 8,
		[]obj{berm("alerts_over_time", scope(obj{"surface": "${surface}", "groupBy": "rule"}))}, series, nil))
	bars(d.add("timeseries", "Alerts by severity", "Alerts per step, a series per severity.", 12, 8,
		[]obj{berm("alerts_over_time", scope(obj{"surface": "${surface}", "groupBy": "severity"}))}, series, nil))
	d.add("table", "Top rules", "Rules by alerts in the range.", 10, 9,
		[]obj{berm("top_rules", scope(obj{"surface": "${surface}", "limit": 20}))}, nil, obj{"showHeader": true})
	d.add("table", "Alerts", "Newest first; the call id opens the call's timeline.", 14, 9,
		[]obj{berm("alerts", scope(obj{"surface": "${surface}", "limit": 500}))},
		obj{"defaults": obj{}, "overrides": []any{
			override("byName", "call_id", prop("links", []any{callLink("call_key")})),
			override("byName", "call_key", prop("custom.hidden", true)),
			override("byName", "severity", prop("custom.cellOptions", obj{"type": "color-text"}), prop("mappings", []any{
				obj{"type": "value", "options": obj{"critical": obj{"color": "dark-red", "index": 0}, "high": obj{"color": "red", "index": 1},
					"medium": obj{"color": "orange", "index": 2}, "low": obj{"color": "yellow", "index": 3}, "info": obj{"color": "blue", "index": 4}}}})),
		}}, obj{"showHeader": true})
	d.add("table", "First-seen binaries per tool", "Binaries a tool executed for the first time ever in the range.", 8, 9,
		[]obj{berm("first_seen", scope(obj{"limit": 200}))}, nil, obj{"showHeader": true})
	d.add("table", "Escape syscalls per tool", fmt.Sprintf("Syscalls of the escape toolbox (ptrace, mount, unshare, setns, bpf, ...) made by the tools, outside berm's set-up."), 8, 9,
		[]obj{berm("escape_syscalls", scope(obj{"limit": 200}))}, nil, obj{"showHeader": true})
	d.add("table", "Egress denials", "Connections the egress policy refused (cgroup socket hooks); the call id opens the call's timeline.", 8, 9,
		[]obj{berm("egress_denials", scope(obj{"limit": 200}))},
		obj{"defaults": obj{}, "overrides": []any{
			override("byName", "call_id", prop("links", []any{callLink("call_key")})),
			override("byName", "call_key", prop("custom.hidden", true)),
		}}, obj{"showHeader": true})
	linked := obj{"defaults": obj{}, "overrides": []any{
		override("byName", "call_id", prop("links", []any{callLink("call_key")})),
		override("byName", "call_key", prop("custom.hidden", true)),
	}}
	d.add("table", "Egress: DNS queries", "Every query of the calls to berm's resolver (all of a networked call's port-53 traffic): name, type, answers (pinned for the call), rcode, verdict.", 16, 9,
		[]obj{berm("dns", scope(obj{"limit": 500}))}, linked, obj{"showHeader": true})
	d.add("timeseries", "Egress: DNS queries by verdict", "Queries per step: allowed (answered, addresses pinned), refused, audit-refused.", 8, 9,
		[]obj{berm("dns_over_time", scope(nil))}, series, nil)
	d.add("timeseries", "Approval refusals", "Actions held for approval and refused per step: denied by a person, no answer in time (timeout), repeated after a deny (repeat).", 8, 9,
		[]obj{berm("approval_refusals", scope(nil))}, series, nil)
	d.add("table", "DNS refusals", "Names the resolver refused (not allowed by the call's policy), and audit-mode would-be refusals.", 8, 9,
		[]obj{berm("dns_refusals", scope(obj{"limit": 200}))}, linked, obj{"showHeader": true})
	d.add("table", "DNS tunnelling alerts", "Alerts of the DNS rules: long labels, high-entropy names, many subdomains of one parent, a connect to an address the call never resolved.", 8, 9,
		[]obj{berm("dns_alerts", scope(obj{"limit": 200}))}, linked, obj{"showHeader": true})
	return d
}

// Call is the incident responder's view of one call.
func Call() *Dashboard {
	d := &Dashboard{File: "call-timeline.json", UID: "berm-call", Title: "berm / Call timeline",
		Description: "One call: summary and each surface's state, process tree, events, files, network, denials and alerts.",
		Tags:        []string{"berm"},
		Vars:        []obj{dsVar("datasource", PluginID, "berm"), valuesVar("tenant", "tenant", "tenant", false), valuesVar("tool", "tool", "tool", true), callVar()}}
	call := obj{"call": "${call}", "tenant": "${tenant:csv}"}
	one := func(extra obj) obj {
		t := obj{}
		for k, v := range call {
			t[k] = v
		}
		for k, v := range extra {
			t[k] = v
		}
		return t
	}
	d.add("table", "Summary", "Who, what, when, how it ended; then each surface's state for this call.", 8, 15,
		[]obj{berm("call_summary", one(nil))},
		obj{"defaults": obj{}, "overrides": []any{override("byName", "value", prop("mappings", stateMappings()), prop("custom.cellOptions", obj{"type": "color-text"}))}},
		obj{"showHeader": false})
	d.add("nodeGraph", "Process tree", "Each process of the call, titled by what it executed; edges from parent to child.", 16, 15,
		[]obj{berm("process_tree", one(obj{"limit": 5000}))}, nil, nil)
	d.add("logs", "Events", "Every event of the call in order (berm's own set-up marked [setup]).", 24, 12,
		[]obj{berm("timeline", one(obj{"limit": 5000}))}, nil,
		obj{"showTime": true, "wrapLogMessage": true, "sortOrder": "Ascending", "enableLogDetails": true, "dedupStrategy": "none", "prettifyLogMessage": false, "showCommonLabels": false, "showLabels": false, "showLogContextToggle": false})
	d.add("table", "Files", "Each path the tool opened: how often, how often refused.", 12, 9, []obj{berm("call_files", one(nil))}, nil, obj{"showHeader": true})
	d.add("table", "Network", "Each connection the tool made.", 12, 9, []obj{berm("call_network", one(nil))}, nil, obj{"showHeader": true})
	d.add("table", "Denials", "What the sandbox refused, by which layer and rule.", 12, 9, []obj{berm("call_denials", one(nil))}, nil, obj{"showHeader": true})
	d.add("table", "Alerts", "What the detection rules found in this call.", 12, 9, []obj{berm("alerts", one(nil))}, nil, obj{"showHeader": true})
	d.add("table", "Approvals", "Actions held for a person's decision: the request, then its outcome (approved, denied, timeout, ended, repeat, covered), by whom, through which channel, after how long.", 12, 9,
		[]obj{berm("approvals", one(nil))}, nil, obj{"showHeader": true})
	d.add("table", "DNS queries", "The call's queries to berm's resolver: name, type, answers (pinned for the call), rcode and verdict.", 12, 9,
		[]obj{berm("dns", one(nil))}, nil, obj{"showHeader": true})
	return d
}

// Agent is the health of the agents and the pipeline to ClickHouse.
func Agent() *Dashboard {
	vars := append(bermVars(), dsVar("prometheus", "prometheus", "Prometheus"),
		obj{"type": "textbox", "name": "instance", "label": "instance (regex)", "query": ".*",
			"current": obj{"text": ".*", "value": ".*"}, "options": []any{}, "hide": 0, "skipUrlSync": false})
	d := &Dashboard{File: "agent-health.json", UID: "berm-agent", Title: "berm / Agent health",
		Description: "bermd and the collector from Prometheus; ingest, backlog and completeness from ClickHouse.",
		Tags:        []string{"berm"}, Vars: vars}
	sel := `{instance=~"$instance"}`
	rate := func(m, by string) string {
		return fmt.Sprintf("sum by (%s) (rate(%s%s[$__rate_interval]))", by, m, sel)
	}
	line := obj{"defaults": obj{"unit": "short", "custom": obj{"drawStyle": "line", "fillOpacity": 10}}, "overrides": []any{}}
	unit := func(u string) obj {
		return obj{"defaults": obj{"unit": u, "custom": obj{"drawStyle": "line", "fillOpacity": 10}}, "overrides": []any{}}
	}
	// a share of a size: 0 to 100 %, whatever the values (all 0 gave an axis to 10000 %)
	share := unit("percentunit")
	share["defaults"].(obj)["min"], share["defaults"].(obj)["max"] = 0, 1
	// full buffers drop events: orange from 80 %, red from 95 %, drawn as lines
	share["defaults"].(obj)["thresholds"] = obj{"mode": "absolute", "steps": []any{
		obj{"color": "green", "value": nil}, obj{"color": "orange", "value": 0.8}, obj{"color": "red", "value": 0.95}}}
	share["defaults"].(obj)["custom"].(obj)["thresholdsStyle"] = obj{"mode": "line"}
	d.add("timeseries", "Events by kind", "Events recorded per second (berm_events_total).", 8, 8,
		[]obj{prom(rate("berm_events_total", "kind"), "{{kind}}")}, unit("ops"), nil)
	d.add("timeseries", "Dropped events by where", "Events lost per second: kernel (ring buffer full), user (agent queue full).", 8, 8,
		[]obj{prom(rate("berm_events_dropped_total", "where"), "{{where}}")}, alarmAt(unit("ops"), 0.001, "red", "area"), nil)
	d.add("timeseries", "Ring buffer and queue usage", "Bytes waiting in the ring buffer and batches waiting in the agent's queue, as a share of their size.", 8, 8,
		[]obj{prom("max by (instance) (berm_ringbuf_pending_bytes"+sel+" / berm_ringbuf_size_bytes"+sel+")", "ring {{instance}}"),
			prom("max by (instance) (berm_queue_bytes"+sel+" / berm_queue_capacity_bytes"+sel+")", "queue {{instance}}")}, share, nil)
	d.add("timeseries", "Launches warm and cold", "Calls launched per second in a warm sandbox or one started for them.", 8, 8,
		[]obj{prom("sum(rate(berm_sandbox_launches_warm_total"+sel+"[$__rate_interval]))", "warm"),
			prom("sum(rate(berm_sandbox_launches_cold_total"+sel+"[$__rate_interval]))", "cold")}, unit("ops"), nil)
	d.add("timeseries", "Launch latency (p50, p99)", "bermd's prepare phase (policy compiled, sandbox claimed) and connect phase.", 8, 8,
		[]obj{prom("histogram_quantile(0.5, sum by (le, phase) (rate(berm_call_phase_seconds_bucket"+sel+"[$__rate_interval])))", "p50 {{phase}}"),
			prom("histogram_quantile(0.99, sum by (le, phase) (rate(berm_call_phase_seconds_bucket"+sel+"[$__rate_interval])))", "p99 {{phase}}")}, alarmAt(unit("s"), 0.5, "orange", "line"), nil)
	d.add("timeseries", "Collector backlog", "Journal bytes not yet in ClickHouse, and the age of the oldest unshipped event.", 8, 8,
		[]obj{prom("max by (instance) (berm_collector_backlog_bytes"+sel+")", "bytes {{instance}}"),
			prom("max by (instance) (berm_collector_oldest_unshipped_event_age_seconds"+sel+")", "oldest s {{instance}}")},
		obj{"defaults": obj{"unit": "bytes", "custom": obj{"drawStyle": "line", "fillOpacity": 10}}, "overrides": []any{
			override("byFrameRefID", "B", prop("unit", "s"), prop("custom.axisPlacement", "right"))}}, nil)
	d.add("timeseries", "Approvals pending", "Actions held in the kernel now, waiting for a person's decision (berm_approvals_pending).", 8, 8,
		[]obj{prom("sum by (instance) (berm_approvals_pending"+sel+")", "pending {{instance}}")}, alarmAt(unit("short"), 1, "orange", "area"), nil)
	d.add("timeseries", "Approval decisions by outcome", "Approval requests ended per second, by outcome.", 8, 8,
		[]obj{prom(rate("berm_approval_decisions_total", "outcome"), "{{outcome}}")}, unit("ops"), nil)
	d.add("timeseries", "Approval decision latency", "How long a person took to decide (p50, p99), and the share of decisions made in under 2 s: a high share is a rubber-stamp signal.", 8, 8,
		[]obj{prom("histogram_quantile(0.5, sum by (le) (rate(berm_approval_decision_seconds_bucket"+sel+"[$__rate_interval])))", "p50"),
			prom("histogram_quantile(0.99, sum by (le) (rate(berm_approval_decision_seconds_bucket"+sel+"[$__rate_interval])))", "p99"),
			prom("max by (instance) (berm_approval_quick_share"+sel+")", "under 2 s {{instance}}")},
		obj{"defaults": obj{"unit": "s", "custom": obj{"drawStyle": "line", "fillOpacity": 10}}, "overrides": []any{
			override("byFrameRefID", "C", prop("unit", "percentunit"), prop("min", 0), prop("max", 1), prop("custom.axisPlacement", "right"))}}, nil)
	d.add("timeseries", "DNS queries by verdict", "Queries of the calls to berm's resolver per second: allowed, refused, audit-refused.", 8, 8,
		[]obj{prom(rate("berm_dns_queries_total", "verdict"), "{{verdict}}")}, unit("ops"), nil)
	d.add("table", "Ingest lag per host", "The newest call record of each host in ClickHouse and how old it is.", 8, 8,
		[]obj{berm("ingest_lag", scope(nil))}, nil, obj{"showHeader": true})
	d.add("table", "Backlog: calls without a record", "Calls started whose record is not in ClickHouse: running, or not shipped yet.", 8, 8,
		[]obj{berm("backlog", scope(nil))}, nil, obj{"showHeader": true})
	d.add("table", "Completeness per host", "Calls, incomplete records, dropped and aggregated events per host.", 8, 8,
		[]obj{berm("completeness", scope(nil))}, nil, obj{"showHeader": true})
	d.add("timeseries", "Drops and incomplete records over time", "Per step, from the call records.", 12, 8,
		[]obj{berm("drops", scope(nil))}, alarmAt(line, 1, "red", "area"), nil)
	callsTable(d, "Incomplete calls", "Calls whose trail misses events, and why.", 12, 8, obj{"complete": "false", "limit": 200})
	return d
}

// All are the dashboards.
func All() []*Dashboard { return []*Dashboard{Matrix(), Escape(), Call(), Agent()} }
