package plugin

import (
	"os"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/bermsec/berm/collector/query"
)

// modelFields are the query model's fields (its JSON names) with a value for each that a query
// type would read: a type uses a field when setting it changes the type's SQL or makes it refuse
// the parameters.
var modelFields = []struct {
	json string
	set  func(*query.Params)
}{
	{"tenant", func(p *query.Params) { p.Tenants = []string{"acme"} }},
	{"tool", func(p *query.Params) { p.Tools = []string{"git"} }},
	{"host", func(p *query.Params) { p.Hosts = []string{"node-1"} }},
	{"surface", func(p *query.Params) { p.Surface = "credential" }},
	{"endReason", func(p *query.Params) { p.EndReason = "timeout" }},
	{"complete", func(p *query.Params) { p.Complete = "true" }},
	{"text", func(p *query.Params) { p.Text = "/etc/shadow" }},
	{"call", func(p *query.Params) { p.Call = "c-42" }},
	{"groupBy", func(p *query.Params) { p.GroupBy = "severity" }},
	{"field", func(p *query.Params) { p.Field = "tool" }},
	{"limit", func(p *query.Params) { p.Limit = 37 }},
}

func baseParams() query.Params {
	to := time.Unix(1_800_000_000, 0)
	return query.Params{Database: "berm", Dialect: query.Legacy, From: to.Add(-time.Hour), To: to, Bucket: time.Minute}
}

func sqlOf(queryType string, p query.Params) (string, error) {
	sts, err := query.Build(queryType, p)
	if err != nil {
		return "", err
	}
	var s string
	for _, st := range sts {
		s += st.SQL + "\n"
	}
	return s, nil
}

// typeFields is, per query type the backend serves, the model fields it reads, in
// modelFields' order: what the query editor shows for that type.
func typeFields(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, qt := range query.Types() {
		if _, err := sqlOf(qt[0], baseParams()); err != nil {
			t.Fatalf("%s with no filters: %v", qt[0], err)
		}
		used := []string{}
		for _, f := range modelFields {
			// a field may count only beside another: a timeline's event kind needs its call
			for _, with := range [][]string{nil, {"call", "field"}} {
				p := baseParams()
				for _, g := range modelFields {
					if slices.Contains(with, g.json) {
						g.set(&p)
					}
				}
				before, _ := sqlOf(qt[0], p)
				f.set(&p)
				after, err := sqlOf(qt[0], p)
				if err != nil || after != before {
					used = append(used, f.json)
					break
				}
			}
		}
		out[qt[0]] = used
	}
	return out
}

// TestModuleJSTypeFields: module.js's TYPE_FIELDS, what its query editor shows per type, are
// the fields each type's SQL reads (TestFrontend checks the rendered editor against the same).
func TestModuleJSTypeFields(t *testing.T) {
	b, err := os.ReadFile("dist/module.js")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)var TYPE_FIELDS = \{(.*?)\};`).FindSubmatch(b)
	if m == nil {
		t.Fatal("module.js has no TYPE_FIELDS")
	}
	inJS := map[string][]string{}
	for _, e := range regexp.MustCompile(`(\w+): \[([^\]]*)\]`).FindAllSubmatch(m[1], -1) {
		fs := []string{}
		for _, f := range regexp.MustCompile(`'(\w+)'`).FindAllSubmatch(e[2], -1) {
			fs = append(fs, string(f[1]))
		}
		inJS[string(e[1])] = fs
	}
	want := typeFields(t)
	for qt, fs := range want {
		if !slices.Equal(inJS[qt], fs) {
			t.Errorf("module.js TYPE_FIELDS.%s = %q, the backend's SQL reads %q", qt, inJS[qt], fs)
		}
	}
	for qt := range inJS {
		if _, ok := want[qt]; !ok {
			t.Errorf("module.js TYPE_FIELDS has %s, which the backend does not serve", qt)
		}
	}
}
