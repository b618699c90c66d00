package query

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestFiltersAreArguments(t *testing.T) {
	hostile := "x' OR 1=1 --\\'; DROP TABLE calls"
	yes := true
	at := time.Date(2025, 3, 14, 9, 26, 53, 589793238, time.UTC)
	tests := []struct {
		name  string
		f     Filter
		conds []string // in the legacy SQL
		args  []any
	}{
		{"none", Filter{}, []string{"WHERE 1 ORDER BY"}, nil},
		{"tenant", Filter{Tenant: hostile}, []string{"tenant = ?"}, []any{hostile}},
		{"tools", Filter{Tools: []string{"a", hostile}}, []string{"has(?, tool)"}, []any{[]string{"a", hostile}}},
		{"host", Filter{Host: hostile}, []string{"node = ?"}, []any{hostile}},
		{"hosts, tenants", Filter{Hosts: []string{"a", hostile}, Tenants: []string{"t", hostile}}, []string{"has(?, tenant) AND has(?, node)"}, []any{[]string{"t", hostile}, []string{"a", hostile}}},
		{"end reason", Filter{EndReason: hostile}, []string{"end_reason = ?"}, []any{hostile}},
		{"complete", Filter{Complete: &yes}, []string{"complete = ?"}, []any{uint8(1)}},
		{"surface violated", Filter{Surface: hostile}, []string{"arrayExists((s, v) -> s = ? AND v > 0, surfaces, surface_violations)"}, []any{hostile}},
		{"surface state", Filter{Surface: "policy", State: hostile}, []string{"arrayExists((s, st) -> s = ? AND st = ?, surfaces, surface_states)"}, []any{"policy", hostile}},
		{"text", Filter{Text: hostile}, []string{"positionCaseInsensitive(concat(call_id,", "end_detail), ?) > 0"}, []any{hostile}},
		{"since, until", Filter{Since: at, Until: at.Add(time.Second)},
			[]string{"(start_time > toDateTime(?) OR start_time = toDateTime(?) AND start_ns >= ?) AND (start_time < toDateTime(?) OR start_time = toDateTime(?) AND start_ns < ?)"},
			[]any{at.Unix(), at.Unix(), uint32(589793238), at.Unix() + 1, at.Unix() + 1, uint32(589793238)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := Tables{Database: "berm", Dialect: Legacy}.CallRecordRaws(tt.f)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range tt.conds {
				if !strings.Contains(q.SQL, c) {
					t.Errorf("SQL %q lacks %q", q.SQL, c)
				}
			}
			if strings.Contains(q.SQL, "DROP") || strings.Count(q.SQL, "?") != len(q.Args) {
				t.Errorf("SQL %q with %d args", q.SQL, len(q.Args))
			}
			if fmt.Sprint(q.Args) != fmt.Sprint(tt.args) {
				t.Errorf("args %v, want %v", q.Args, tt.args)
			}
			m, err := Tables{Database: "berm", Dialect: Modern}.Matrix(tt.f)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(m.SQL, "DROP") || strings.Count(m.SQL, "?") != len(m.Args) {
				t.Errorf("matrix SQL %q with %d args", m.SQL, len(m.Args))
			}
		})
	}
}

func TestModernTimeBounds(t *testing.T) {
	at := time.Date(2025, 3, 14, 10, 26, 53, 5, time.FixedZone("x", 3600))
	q, err := Tables{Database: "berm", Dialect: Modern}.CallStartRaws(Filter{Since: at, Until: at})
	if err != nil {
		t.Fatal(err)
	}
	want := "start_time >= toDateTime64(?, 9, 'UTC') AND start_time < toDateTime64(?, 9, 'UTC') ORDER BY start_time"
	if !strings.Contains(q.SQL, want) || fmt.Sprint(q.Args) != "[2025-03-14 09:26:53.000000005 2025-03-14 09:26:53.000000005]" {
		t.Errorf("SQL %q args %v", q.SQL, q.Args)
	}
}

func TestRefused(t *testing.T) {
	yes := true
	tests := []struct {
		name string
		run  func() (Query, error)
	}{
		{"database not an identifier", func() (Query, error) {
			return Tables{Database: "berm; DROP TABLE x", Dialect: Legacy}.CallRecordRaws(Filter{})
		}},
		{"unknown dialect", func() (Query, error) { return Tables{Database: "berm", Dialect: "new"}.Matrix(Filter{}) }},
		{"end reason on call starts", func() (Query, error) {
			return Tables{Database: "berm", Dialect: Legacy}.CallStartRaws(Filter{EndReason: "exit"})
		}},
		{"complete on call starts", func() (Query, error) {
			return Tables{Database: "berm", Dialect: Legacy}.CallStartRaws(Filter{Complete: &yes})
		}},
		{"column not an identifier", func() (Query, error) {
			return Tables{Database: "berm", Dialect: Legacy}.Events([]string{"pid, (SELECT 1)"}, "t", "t", "c", "k")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if q, err := tt.run(); err == nil {
				t.Errorf("built %q", q.SQL)
			}
		})
	}
}
