package collector

import (
	"context"
	"log/slog"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/collector/audit"
	"github.com/bermsec/berm/collector/query"
)

// TestQueriesOnServer runs collector/query's filters on a real server against a shipped
// journal: each selects exactly the calls the same condition selects in the journal's
// records, hostile values select nothing and break nothing, and the matrix query's rows are
// audit.MatrixRows of the journal's calls.
func TestQueriesOnServer(t *testing.T) {
	s := server(t)
	dsn := freshDB(t, s)
	state := t.TempDir()
	writeCalls(t, state, "RB", 10, 20, 20, true)
	c, _ := newCollector(t, state, dsn, nil)
	if err := c.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	src, err := OpenSource(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	jcalls, err := audit.Journal{Dir: filepath.Join(state, "journal"), Log: slog.New(slog.DiscardHandler)}.Calls(audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var recs []*event.CallRecord
	for _, c := range jcalls {
		recs = append(recs, c.Record)
	}
	surface := func(r *event.CallRecord, name string) *event.SurfaceState {
		for i := range r.Surfaces {
			if r.Surfaces[i].Surface == name {
				return &r.Surfaces[i]
			}
		}
		return nil
	}
	start2 := recs[2].Start
	yes, no := true, false
	hostile := "acme' OR '1'='1' --\\"
	tests := []struct {
		name string
		f    query.Filter
		want func(r *event.CallRecord) bool
	}{
		{"all", query.Filter{}, func(*event.CallRecord) bool { return true }},
		{"tenant", query.Filter{Tenant: "acme"}, func(r *event.CallRecord) bool { return r.Tenant == "acme" }},
		{"tools", query.Filter{Tools: []string{"shell", "python"}}, func(r *event.CallRecord) bool { return r.Tool == "shell" || r.Tool == "python" }},
		{"host", query.Filter{Host: "node-1"}, func(r *event.CallRecord) bool { return r.Node == "node-1" }},
		{"hosts", query.Filter{Hosts: []string{"elsewhere", "node-1"}}, func(r *event.CallRecord) bool { return r.Node == "node-1" }},
		{"hosts, none here", query.Filter{Hosts: []string{"elsewhere", hostile}}, func(*event.CallRecord) bool { return false }},
		{"tenants", query.Filter{Tenants: []string{"acme", hostile}}, func(r *event.CallRecord) bool { return r.Tenant == "acme" }},
		{"end reason", query.Filter{EndReason: "exit"}, func(r *event.CallRecord) bool { return r.EndReason == event.EndExit }},
		{"another end reason", query.Filter{EndReason: "timeout"}, func(r *event.CallRecord) bool { return r.EndReason == event.EndTimeout }},
		{"complete", query.Filter{Complete: &yes}, func(r *event.CallRecord) bool { return r.Complete }},
		{"incomplete", query.Filter{Complete: &no}, func(r *event.CallRecord) bool { return !r.Complete }},
		{"surface violated", query.Filter{Surface: "policy"}, func(r *event.CallRecord) bool {
			s := surface(r, "policy")
			return s != nil && s.Violations > 0
		}},
		{"surface state", query.Filter{Surface: "observability", State: "absent"}, func(r *event.CallRecord) bool {
			s := surface(r, "observability")
			return s != nil && s.State == "absent"
		}},
		{"any violated", query.Filter{State: "violated"}, func(r *event.CallRecord) bool {
			return slices.ContainsFunc(r.Surfaces, func(s event.SurfaceState) bool { return s.Violated })
		}},
		{"text in the id", query.Filter{Text: "rb-0003"}, func(r *event.CallRecord) bool { return r.CallID == "RB-0003" }},
		{"text in argv", query.Filter{Text: "SHA256sum"}, func(*event.CallRecord) bool { return true }},
		{"since, to the nanosecond", query.Filter{Since: start2}, func(r *event.CallRecord) bool { return !r.Start.Before(start2) }},
		{"since, a nanosecond later", query.Filter{Since: start2.Add(time.Nanosecond)}, func(r *event.CallRecord) bool { return r.Start.After(start2) }},
		{"until, exclusive", query.Filter{Until: start2}, func(r *event.CallRecord) bool { return r.Start.Before(start2) }},
		{"hostile tenant", query.Filter{Tenant: hostile}, func(*event.CallRecord) bool { return false }},
		{"hostile tools", query.Filter{Tools: []string{"shell']) OR 1 --", hostile}}, func(*event.CallRecord) bool { return false }},
		{"hostile text", query.Filter{Text: hostile}, func(*event.CallRecord) bool { return false }},
		{"text with a quote finds the quote", query.Filter{Text: "'"}, func(*event.CallRecord) bool { return false }},
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := src.Tables().CallRecordRaws(tt.f)
			raws, err := src.raws(ctx, "calls", q, err)
			if err != nil {
				t.Fatal(err)
			}
			var got, want []string
			for _, raw := range raws {
				r, err := decodeCallRecord(raw)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, r.CallID)
			}
			for _, r := range recs {
				if tt.want(r) {
					want = append(want, r.CallID)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("clickhouse selected %v, the journal's records %v\n%s %v", got, want, q.SQL, q.Args)
			}
		})
	}
	if n := count(t, connect(t, dsn), "SELECT count() FROM "+c.db+".calls"); n != 10 {
		t.Fatalf("calls after the hostile queries: %d rows", n)
	}

	for _, f := range []audit.Filter{{}, {Tenant: "acme"}, {Tool: "shell"}, {Since: start2}} {
		for _, surf := range []string{"", "policy"} {
			got, err := src.MatrixRows(f, surf)
			if err != nil {
				t.Fatal(err)
			}
			var sel []audit.Call
			for _, c := range jcalls {
				if f.Match(&c.Start) {
					sel = append(sel, c)
				}
			}
			want := audit.MatrixRows(sel, surf)
			if len(want) == 0 || !reflect.DeepEqual(got, want) {
				t.Errorf("matrix rows for %+v %q:\nclickhouse %+v\njournal    %+v", f, surf, got, want)
			}
		}
	}
	// The matrix query's SQL names no value.
	q, _ := src.Tables().Matrix(query.Filter{Tenant: hostile})
	if strings.Contains(q.SQL, "acme") {
		t.Errorf("matrix SQL holds the filter's value: %s", q.SQL)
	}
}
