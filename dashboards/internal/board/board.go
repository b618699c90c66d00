// Package board writes berm's Grafana dashboards: the JSON in dashboards/ is its output
// (go generate ./dashboards), so that every panel's query, link and colour is written once here.
package board

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/bermsec/berm/agent/event"
)

// PluginID is the datasource plugin's id.
const PluginID = "berm-datasource"

type obj = map[string]any

// Dashboard is one dashboard being written.
type Dashboard struct {
	File, UID, Title, Description string
	Tags                          []string
	Vars                          []obj
	panels                        []obj
	x, y, rowH                    int
}

var bermDS = obj{"type": PluginID, "uid": "${datasource}"}
var promDS = obj{"type": "prometheus", "uid": "${prometheus}"}

// scope is the filter every panel of a berm dashboard takes from the variables.
func scope(extra obj) obj {
	t := obj{"tenant": "${tenant:csv}", "tool": "${tool:csv}", "host": "${host:csv}"}
	for k, v := range extra {
		t[k] = v
	}
	return t
}

// berm is a target of the berm datasource.
func berm(queryType string, fields obj) obj {
	t := obj{"datasource": bermDS, "queryType": queryType}
	for k, v := range fields {
		t[k] = v
	}
	return t
}

// prom is a target of the Prometheus datasource.
func prom(expr, legend string) obj {
	return obj{"datasource": promDS, "expr": expr, "legendFormat": legend, "range": true}
}

// add places a panel after the previous one, w columns of 24 wide and h rows high, wrapping.
func (d *Dashboard) add(typ, title, desc string, w, h int, targets []obj, fieldConfig obj, options obj) obj {
	if d.x+w > 24 {
		d.x, d.y, d.rowH = 0, d.y+d.rowH, 0
	}
	ds := bermDS
	for i, t := range targets {
		t["refId"] = string(rune('A' + i))
		if t["datasource"] != nil {
			ds = t["datasource"].(obj)
		}
	}
	p := obj{
		"id": len(d.panels) + 1, "type": typ, "title": title, "description": desc,
		"gridPos":    obj{"x": d.x, "y": d.y, "w": w, "h": h},
		"datasource": ds, "targets": targets,
	}
	if fieldConfig == nil {
		fieldConfig = obj{"defaults": obj{}, "overrides": []any{}}
	}
	p["fieldConfig"] = fieldConfig
	if options != nil {
		p["options"] = options
	}
	d.panels = append(d.panels, p)
	d.x += w
	d.rowH = max(d.rowH, h)
	return p
}

// JSON is the dashboard as Grafana reads it.
func (d *Dashboard) JSON() ([]byte, error) {
	m := obj{
		"uid": d.UID, "title": d.Title, "description": d.Description, "tags": d.Tags,
		"editable": true, "graphTooltip": 1, "schemaVersion": 38, "version": 1,
		"time": obj{"from": "now-24h", "to": "now"}, "refresh": "1m", "timezone": "utc",
		"templating":  obj{"list": d.Vars},
		"annotations": obj{"list": []any{}},
		"links": []any{obj{"title": "berm", "type": "dashboards", "tags": []string{"berm"}, "asDropdown": true,
			"includeVars": true, "keepTime": true, "icon": "external link", "targetBlank": false, "tooltip": "", "url": ""}},
		"panels": d.panels,
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m); err != nil {
		return nil, fmt.Errorf("dashboard %s: %w", d.UID, err)
	}
	return b.Bytes(), nil
}

// Variables.

func dsVar(name, pluginType, label string) obj {
	return obj{"type": "datasource", "name": name, "label": label, "query": pluginType, "hide": 0,
		"refresh": 1, "regex": "", "skipUrlSync": false, "multi": false, "includeAll": false,
		"options": []any{}}
}

func valuesVar(name, label, field string, multi bool) obj {
	return obj{"type": "query", "name": name, "label": label, "datasource": bermDS,
		"query":   obj{"queryType": "values", "field": field, "tenant": "${tenant:csv}", "refId": "V"},
		"refresh": 2, "multi": multi, "includeAll": true, "allValue": "*",
		"current": obj{"text": []string{"All"}, "value": []string{"$__all"}, "selected": true},
		"options": []any{}, "hide": 0, "sort": 1, "regex": "", "skipUrlSync": false}
}

// surfaceVar is a custom variable: Grafana does not compute a custom variable's options when it
// loads a dashboard, it reads those saved with it, so they are written here (an empty list is
// an empty picker).
func surfaceVar() obj {
	opts := []any{obj{"text": "All", "value": "$__all", "selected": true}}
	for _, s := range event.Surfaces {
		opts = append(opts, obj{"text": s, "value": s, "selected": false})
	}
	return obj{"type": "custom", "name": "surface", "label": "surface",
		"query":      strings.Join(event.Surfaces, ","),
		"includeAll": true, "allValue": "*", "multi": false,
		"current": obj{"text": "All", "value": "$__all", "selected": true},
		"options": opts, "hide": 0, "skipUrlSync": false}
}

func callVar() obj {
	return obj{"type": "query", "name": "call", "label": "call (recent)", "datasource": bermDS,
		"query":   obj{"queryType": "values", "field": "call", "tenant": "${tenant:csv}", "tool": "${tool:csv}", "limit": 200, "refId": "V"},
		"refresh": 2, "multi": false, "includeAll": false,
		"current": obj{"text": "", "value": "", "selected": false},
		"options": []any{}, "hide": 0, "sort": 0, "regex": "", "skipUrlSync": false}
}

func bermVars() []obj {
	return []obj{
		dsVar("datasource", PluginID, "berm"),
		valuesVar("tenant", "tenant", "tenant", false),
		valuesVar("tool", "tool", "tool", true),
		surfaceVar(),
		valuesVar("host", "host", "host", true),
	}
}

// Links.

// callLink opens a call's timeline from a row that has its key, keeping the datasource, the
// tenant and the time range.
func callLink(field string) obj {
	return obj{"title": "call timeline", "url": "/d/berm-call/berm-call-timeline?var-datasource=${datasource}&${tenant:queryparam}&var-call=${__data.fields." + field + ":percentencode}&${__url_time_range}"}
}

// override sets properties on the fields a matcher picks.
func override(matcher, option string, props ...obj) obj {
	return obj{"matcher": obj{"id": matcher, "options": option}, "properties": props}
}

func prop(id string, v any) obj { return obj{"id": id, "value": v} }
