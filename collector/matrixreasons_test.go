package collector

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/journal"
	"github.com/bermsec/berm/collector/audit"
)

// The degraded surfaces' reasons berm matrix footnotes are the same from ClickHouse
// (query.MatrixReasons) as from the journal shipped there (audit.MatrixReasons), with a
// surface's column and without.
func TestMatrixReasonsFromClickHouseAreTheJournals(t *testing.T) {
	s := server(t)
	dsn := freshDB(t, s)
	state := t.TempDir()
	w, err := journal.OpenWriter(filepath.Join(state, "journal"))
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2025, 3, 14, 9, 0, 0, 0, time.UTC)
	reasons := []map[string]string{
		{"policy": "bpf-lsm refused: spec.filesystem.deny unenforced"},
		{"policy": "bpf-lsm refused: spec.filesystem.deny unenforced", "observability": "3 events lost"},
		{"observability": "3 events lost"},
		nil,
	}
	for i, rs := range reasons {
		st := event.CallStart{CallID: fmt.Sprintf("mr-%d", i), Tool: []string{"shell", "python"}[i%2], Tenant: "acme", Start: base.Add(time.Duration(i) * time.Second), Node: "n"}
		if err := w.AppendCallStart(&st); err != nil {
			t.Fatal(err)
		}
		var ss []event.SurfaceState
		for _, sf := range event.Surfaces {
			s := event.SurfaceState{Surface: sf, State: event.StateEnforced, Layers: []string{}}
			if r, ok := rs[sf]; ok {
				s.State, s.Reason = event.StateDegraded, r
			}
			ss = append(ss, s)
		}
		rec := &event.CallRecord{CallStart: st, End: st.Start.Add(time.Second), EndReason: event.EndExit, Surfaces: ss, Complete: true}
		if err := w.AppendCallEnd(rec); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
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
	for _, surface := range []string{"", "policy", "isolation"} {
		got, err := src.MatrixReasons(audit.Filter{}, surface)
		if err != nil {
			t.Fatal(err)
		}
		want := audit.MatrixReasons(jcalls, surface)
		if len(got) == 0 && len(want) == 0 {
			got, want = nil, nil
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("surface %q: clickhouse %+v, journal %+v", surface, got, want)
		}
		if surface == "" && len(want) != 4 {
			t.Errorf("journal reasons %+v, want 4 groups (each tool's policy and observability)", want)
		}
	}
}
