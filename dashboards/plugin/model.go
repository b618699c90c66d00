package plugin

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"

	"github.com/bermsec/berm/collector"
	"github.com/bermsec/berm/collector/query"
)

// Model is a panel's query as the query editor writes it. The frontend interpolates template
// variables before the query reaches the backend (multi-values as comma-separated lists).
type Model struct {
	QueryType string `json:"queryType"`
	Tenant    string `json:"tenant"`
	Tool      string `json:"tool"`
	Host      string `json:"host"`
	Surface   string `json:"surface"`
	EndReason string `json:"endReason"`
	Complete  string `json:"complete"`
	Text      string `json:"text"`
	Call      string `json:"call"`
	GroupBy   string `json:"groupBy"`
	Field     string `json:"field"`
	Limit     int    `json:"limit"`
}

// ParseModel reads a query's JSON; the query type may also be the DataQuery's.
func ParseModel(q backend.DataQuery) (Model, error) {
	var m Model
	if err := json.Unmarshal(q.JSON, &m); err != nil {
		return m, fmt.Errorf("query %s: %w", q.RefID, err)
	}
	if m.QueryType == "" {
		m.QueryType = q.QueryType
	}
	if m.QueryType == "" {
		return m, fmt.Errorf("query %s: no queryType", q.RefID)
	}
	return m, nil
}

// uninterpolated is a template variable the frontend did not replace: matching it literally
// would silently give nothing, so it is an error.
var uninterpolated = regexp.MustCompile(`^\$(\{\w+(:\w+)?\}|\w+)$`)

// allValues are what a variable's "All" may arrive as.
var allValues = []string{"", "*", "$__all", "All", "all"}

func list(name, v string) ([]string, error) {
	v = strings.TrimSpace(v)
	if slices.Contains(allValues, v) {
		return nil, nil
	}
	if uninterpolated.MatchString(v) {
		return nil, fmt.Errorf("%s %q is a template variable that was not interpolated", name, v)
	}
	if strings.HasPrefix(v, "{") {
		v = strings.TrimSuffix(strings.TrimPrefix(v, "{"), "}") // the frontend's {a,b} glob format
	}
	if slices.Contains(allValues, v) {
		return nil, nil
	}
	var out []string
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if slices.Contains(allValues[1:], s) {
			return nil, nil
		}
		if uninterpolated.MatchString(s) {
			return nil, fmt.Errorf("%s %q is a template variable that was not interpolated", name, s)
		}
		out = append(out, s)
	}
	return out, nil
}

func one(name, v string) (string, error) {
	vs, err := list(name, v)
	if err != nil || len(vs) == 0 {
		return "", err
	}
	if len(vs) > 1 {
		return "", fmt.Errorf("%s takes one value, got %q", name, v)
	}
	return vs[0], nil
}

// Params turns the model into the query package's parameters: the time range and step from
// Grafana, the tenant restricted to the datasource's when it has one.
func (m Model) Params(q backend.DataQuery, s collector.Schema, pinnedTenant string) (query.Params, error) {
	p := query.Params{
		Database: s.Database, Dialect: query.Dialect(s.Dialect),
		From: q.TimeRange.From, To: q.TimeRange.To,
		Complete: m.Complete, GroupBy: m.GroupBy, Field: m.Field, Limit: m.Limit,
		Text: m.Text,
	}
	if uninterpolated.MatchString(strings.TrimSpace(m.Text)) {
		return p, fmt.Errorf("text %q is a template variable that was not interpolated", m.Text)
	}
	p.Bucket = q.Interval
	if q.MaxDataPoints > 0 {
		if min := q.TimeRange.Duration() / time.Duration(q.MaxDataPoints); min > p.Bucket {
			p.Bucket = min
		}
	}
	p.Bucket = p.Bucket.Round(time.Second)
	var err error
	if p.Tenants, err = list("tenant", m.Tenant); err != nil {
		return p, err
	}
	if p.Tools, err = list("tool", m.Tool); err != nil {
		return p, err
	}
	if p.Hosts, err = list("host", m.Host); err != nil {
		return p, err
	}
	for _, f := range []struct {
		name string
		v    string
		dst  *string
	}{{"surface", m.Surface, &p.Surface}, {"end reason", m.EndReason, &p.EndReason}, {"call", m.Call, &p.Call}, {"complete", m.Complete, &p.Complete}} {
		if *f.dst, err = one(f.name, f.v); err != nil {
			return p, err
		}
	}
	if pinnedTenant != "" {
		if len(p.Tenants) > 0 && !slices.Contains(p.Tenants, pinnedTenant) {
			return p, fmt.Errorf("this datasource is restricted to tenant %s", pinnedTenant)
		}
		p.Tenants = []string{pinnedTenant}
	}
	return p, nil
}
