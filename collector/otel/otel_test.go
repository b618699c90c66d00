package otel

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/journal"
	"github.com/bermsec/berm/testenv/otelcol"
)

// node is a state dir with a journal that test calls are written to.
type node struct {
	t     *testing.T
	state string
	w     *journal.Writer
	t0    time.Time
}

func newNode(t *testing.T) *node {
	state := t.TempDir()
	w, err := journal.OpenWriter(filepath.Join(state, "journal"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return &node{t: t, state: state, w: w, t0: time.Now().Add(-time.Minute)}
}

func (n *node) start(id, traceparent string) *event.CallStart {
	s := &event.CallStart{CallID: id, CallKey: "k-" + id, Tool: "tool-" + id, Tenant: "acme", Policy: "strict", Start: n.t0, TraceParent: traceparent}
	if err := n.w.AppendCallStart(s); err != nil {
		n.t.Fatal(err)
	}
	return s
}

func (n *node) denials(s *event.CallStart, k int) {
	var evs []event.Event
	for i := 0; i < k; i++ {
		evs = append(evs, event.Event{CallID: s.CallID, CallKey: s.CallKey, Tool: s.Tool, Tenant: s.Tenant, Seq: uint64(i + 1), Time: n.t0.Add(time.Duration(i) * time.Millisecond),
			Kind: event.KindDenial, Denial: &event.Denial{Layer: "landlock", Surface: "isolation", Rule: "fs", Object: fmt.Sprintf("/etc/secret-%d", i)}})
	}
	if err := n.w.AppendEvents(evs); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) end(s *event.CallStart) {
	r := &event.CallRecord{CallStart: *s, End: n.t0.Add(time.Second), EndReason: event.EndExit, Complete: true}
	if err := n.w.AppendCallEnd(r); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) call(id string) {
	n.end(n.start(id, ""))
}

// run runs an exporter until the returned stop.
func (n *node) run(cfg Config) (stop func(), x *Exporter) {
	n.t.Helper()
	reg := prometheus.NewRegistry()
	cfg.StateDir, cfg.Registry, cfg.Poll, cfg.Backoff = n.state, reg, 20*time.Millisecond, 20*time.Millisecond
	x, err := New(cfg)
	if err != nil {
		n.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- x.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			n.t.Errorf("run: %v", err)
		}
		x.Close()
	}, x
}

// waitSpans reads the collector's file until it holds n spans (or fails the test after a
// minute; no assertion on time, a bound on a hang).
func waitSpans(t *testing.T, c *otelcol.Collector, n int) []otelcol.Span {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		spans, _, err := c.Read()
		if err == nil && len(spans) >= n {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("the collector holds %d spans (err %v), want %d\n%s", len(spans), err, n, c.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func spanNames(spans []otelcol.Span) map[string]int {
	m := map[string]int{}
	for _, s := range spans {
		id, _ := s.Attributes.Get("gen_ai.tool.call.id")
		m[id]++
	}
	return m
}

func TestASpanIsAChildOfTheCallersTraceparentAndARootWithoutOne(t *testing.T) {
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tc := range []struct {
		name, traceparent, wantParent string
		wantTrace                     func(string) bool
	}{
		{"with a traceparent", tp, "00f067aa0ba902b7", func(s string) bool { return s == "4bf92f3577b34da6a3ce929d0e0e4736" }},
		{"without one", "", "", func(s string) bool { return len(s) == 32 && s != strings.Repeat("0", 32) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &event.CallStart{CallID: "c1", CallKey: "key1", Tool: "grep", TraceParent: tc.traceparent}
			sp := Span(&event.CallRecord{CallStart: *s, EndReason: event.EndExit}, nil, 0)
			if got := hex.EncodeToString(sp.ParentSpanId); got != tc.wantParent {
				t.Errorf("parent span id %q, want %q", got, tc.wantParent)
			}
			if got := hex.EncodeToString(sp.TraceId); !tc.wantTrace(got) {
				t.Errorf("trace id %q", got)
			}
			if sp.Name != "execute_tool grep" {
				t.Errorf("name %q", sp.Name)
			}
			again := Span(&event.CallRecord{CallStart: *s}, nil, 0)
			if hex.EncodeToString(again.SpanId) != hex.EncodeToString(sp.SpanId) || hex.EncodeToString(again.TraceId) != hex.EncodeToString(sp.TraceId) {
				t.Errorf("the ids of a call differ between two builds of its span")
			}
		})
	}
}

func TestSafeMakesAnyBytesAValidPrintableBoundedAttribute(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/etc/passwd", "/etc/passwd"},
		{"caf\xc3\xa9", "café"},
		{"bad\xffbyte", `bad\xffbyte`},
		{"esc\x1b[31mred", `esc\x1b[31mred`},
		{"bidi\u202etxt", `bidi\u202etxt`},
		{"tab\there", `tab\there`},
	} {
		if got := safe(tc.in); got != tc.want {
			t.Errorf("safe(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := safe(strings.Repeat("a", 10000)); len(got) > maxString+3 {
		t.Errorf("safe of 10000 bytes is %d bytes long", len(got))
	}
}

func TestACallsEventsPastItsBoundAreCountedAndTheSpanSaysHowMany(t *testing.T) {
	c := otelcol.ForTest(t)
	n := newNode(t)
	stop, x := n.run(Config{Endpoint: c.GRPC, EventsPerCall: 2})
	defer stop()
	s := n.start("many", "")
	n.denials(s, 5)
	n.end(s)
	spans := waitSpans(t, c, 1)
	if len(spans[0].Events) != 2 || spans[0].DroppedEventsCount != 3 {
		t.Fatalf("span has %d events and %d dropped, want 2 and 3", len(spans[0].Events), spans[0].DroppedEventsCount)
	}
	if got := testutil.ToFloat64(x.m.dropped.WithLabelValues("span_events", "per_call_bound")); got != 3 {
		t.Errorf("berm_otlp_dropped_total{span_events,per_call_bound} = %v, want 3", got)
	}
}

func TestSpansWaitInTheJournalWhileTheCollectorIsDownAndNoneIsExportedTwiceAfterARestart(t *testing.T) {
	c := otelcol.ForTest(t)
	c.Down()
	n := newNode(t)
	stop, _ := n.run(Config{Endpoint: c.GRPC, Attempts: 1000})
	for i := 0; i < 5; i++ {
		n.call(fmt.Sprintf("down-%d", i))
	}
	// An open call across the restart: its events come before a call that ends, its end after.
	long := n.start("long", "")
	n.denials(long, 2)
	n.call("before-restart")
	time.Sleep(200 * time.Millisecond) // let the exporter fail a few times (not an assertion)
	if err := c.Up(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitSpans(t, c, 6)
	stop()
	n.end(long)
	n.call("after-restart")
	stop, _ = n.run(Config{Endpoint: c.GRPC})
	defer stop()
	spans := waitSpans(t, c, 8)
	time.Sleep(300 * time.Millisecond) // a duplicate would come now (not an assertion on time)
	spans, _, _ = c.Read()
	got := spanNames(spans)
	for _, id := range []string{"down-0", "down-1", "down-2", "down-3", "down-4", "before-restart", "long", "after-restart"} {
		if got[id] != 1 {
			t.Errorf("call %s exported %d times, want once (all: %v)", id, got[id], got)
		}
	}
	if len(spans) != 8 {
		t.Errorf("%d spans, want 8: %v", len(spans), got)
	}
	for _, s := range spans {
		if id, _ := s.Attributes.Get("gen_ai.tool.call.id"); id == "long" && len(s.Events) != 2 {
			t.Errorf("the call open across the restart has %d span events, want its 2 denials", len(s.Events))
		}
	}
}

func TestAnExportThatFailsEveryAttemptIsDroppedAndCounted(t *testing.T) {
	n := newNode(t)
	var logs syncBuffer
	stop, x := n.run(Config{Endpoint: "127.0.0.1:1", Attempts: 2, Timeout: time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	defer stop()
	n.call("lost")
	deadline := time.Now().Add(time.Minute)
	for testutil.ToFloat64(x.m.dropped.WithLabelValues("spans", "undelivered")) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the undeliverable span was never counted as dropped")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// the count has no call id (a label per call would grow without bound): the log line names it
	if !strings.Contains(logs.String(), "export dropped after every attempt failed") || !strings.Contains(logs.String(), "calls=acme/lost") {
		t.Errorf("the drop's log line does not name the call acme/lost:\n%s", logs.String())
	}
}

// syncBuffer is a bytes.Buffer the exporter's goroutines may log to while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestNamedListsEachCallOnceAndBoundsTheLine(t *testing.T) {
	var many []string
	for i := 0; i < namedMax+5; i++ {
		many = append(many, fmt.Sprintf("acme/c%d", i), fmt.Sprintf("acme/c%d", i))
	}
	for _, tc := range []struct {
		name  string
		calls []string
		want  string
	}{
		{"one call", []string{"acme/a"}, "acme/a"},
		{"a call with two alerts is named once", []string{"acme/a", "acme/a", "beta/b"}, "acme/a beta/b"},
		{"past the bound, how many more", many, "and 5 more"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := named(tc.calls)
			if !strings.HasSuffix(got, tc.want) {
				t.Errorf("named = %q, want it to end in %q", got, tc.want)
			}
		})
	}
}

func TestNewRefusesABadEndpointOrProtocol(t *testing.T) {
	for _, cfg := range []Config{{Endpoint: "nohostport"}, {Endpoint: "127.0.0.1:4317", Protocol: "thrift"}} {
		cfg.StateDir = t.TempDir()
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted it", cfg)
		}
	}
}

// A tool names what it likes: a path with bytes that are not UTF-8, a terminal escape and a bidi
// override reaches the collector as printable text, and its neighbour in the batch too.
func TestAHostileObjectNameDoesNotCostItsBatch(t *testing.T) {
	c := otelcol.ForTest(t)
	n := newNode(t)
	stop, _ := n.run(Config{Endpoint: c.GRPC})
	defer stop()
	s := n.start("hostile", "")
	ev := event.Event{CallID: s.CallID, CallKey: s.CallKey, Tool: s.Tool, Tenant: s.Tenant, Seq: 1, Time: n.t0, Kind: event.KindDenial,
		Denial: &event.Denial{Layer: "landlock", Surface: "isolation", Rule: "fs", Object: "/tmp/\xff\xfe\x1b[2J\u202egpj.exe"}}
	if err := n.w.AppendEvents([]event.Event{ev}); err != nil {
		t.Fatal(err)
	}
	n.end(s)
	n.call("neighbour")
	spans := waitSpans(t, c, 2)
	for _, s := range spans {
		if id, _ := s.Attributes.Get("gen_ai.tool.call.id"); id == "hostile" {
			obj, _ := s.Events[0].Attributes.Get("berm.object")
			// The journal's JSON made the bytes U+FFFD; the escape and the bidi override are
			// written as escapes, so no viewer's terminal acts on them.
			if want := "/tmp/\ufffd\ufffd" + `\x1b[2J\u202egpj.exe`; obj != want {
				t.Errorf("object %q, want %q", obj, want)
			}
		}
	}
}

func TestBothTransportsDeliverTheSpanAndTheAlertsLogRecord(t *testing.T) {
	c := otelcol.ForTest(t)
	for _, tc := range []struct{ protocol, endpoint string }{{ProtocolGRPC, c.GRPC}, {ProtocolHTTP, c.HTTP}} {
		t.Run(tc.protocol, func(t *testing.T) {
			before, beforeLogs, _ := c.Read()
			n := newNode(t)
			stop, _ := n.run(Config{Endpoint: tc.endpoint, Protocol: tc.protocol})
			defer stop()
			s := n.start("alerting-"+strings.ReplaceAll(tc.protocol, "/", "-"), "")
			ev := event.Event{CallID: s.CallID, CallKey: s.CallKey, Tool: s.Tool, Tenant: s.Tenant, Seq: 1, Time: n.t0, Kind: event.KindAlert,
				Alert: &event.Alert{RuleID: "credential-system-files", Title: "read of a credential file", Severity: "high", Surface: "credential", Technique: []string{"T1003.008"}, Output: "cat read /etc/shadow"}}
			if err := n.w.AppendEvents([]event.Event{ev}); err != nil {
				t.Fatal(err)
			}
			n.end(s)
			spans := waitSpans(t, c, len(before)+1)
			_, logs, _ := c.Read()
			for deadline := time.Now().Add(time.Minute); len(logs) < len(beforeLogs)+1; {
				if time.Now().After(deadline) {
					t.Fatalf("no log record for the alert\n%s", c.Log())
				}
				time.Sleep(50 * time.Millisecond)
				_, logs, _ = c.Read()
			}
			sp, l := spans[len(spans)-1], logs[len(logs)-1]
			if id, _ := sp.Attributes.Get("gen_ai.tool.call.id"); id != s.CallID || len(sp.Events) != 1 || sp.Events[0].Name != "berm.alert" {
				t.Errorf("span %+v", sp)
			}
			if r, _ := l.Attributes.Get("berm.alert.rule_id"); r != "credential-system-files" || l.SeverityText != "high" || l.SeverityNumber != 17 || l.TraceID != sp.TraceID || l.SpanID != sp.SpanID {
				t.Errorf("log record %+v, span %s/%s", l, sp.TraceID, sp.SpanID)
			}
			if tech, _ := l.Attributes.Get("berm.alert.technique"); tech != "[T1003.008]" {
				t.Errorf("technique %q", tech)
			}
		})
	}
}

func TestDenialsAlertsAndApprovalsBecomeSpanEventsAndNothingElseDoes(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		e    event.Event
		name string // "" : not a span event
	}{
		{event.Event{Kind: event.KindDenial, Denial: &event.Denial{Layer: "landlock", Object: "/etc/shadow"}}, "berm.denial"},
		{event.Event{Kind: event.KindAlert, Alert: &event.Alert{RuleID: "r", Severity: "low"}}, "berm.alert"},
		{event.Event{Kind: event.KindApproval, Approval: &event.Approval{Outcome: "approved", ID: "a1", Action: "unlink", Object: "/w/f", By: "alice"}}, "berm.approval"},
		{event.Event{Kind: event.KindOpen, Open: &event.Open{Path: `/tmp/"kind":"x"`}}, ""},
		{event.Event{Kind: event.KindExec, Exec: &event.Exec{Filename: "/bin/sh"}}, ""},
	} {
		tc.e.Time, tc.e.Seq = now, 7
		se, ok := SpanEvent(&tc.e)
		if (tc.name != "") != ok || (ok && se.Name != tc.name) {
			t.Errorf("%s: span event %v %v, want %q", tc.e.Kind, ok, se, tc.name)
		}
		raw, err := json.Marshal([]event.Event{tc.e})
		if err != nil {
			t.Fatal(err)
		}
		if tc.name != "" && !carriesSpanEvents(raw) {
			t.Errorf("%s: the journal record is skipped undecoded", tc.e.Kind)
		}
	}
}

// A full queue makes the exporter wait, not drop: a collector that stalls (stopped, its socket
// open) holds up one export, the follower stops reading once the queue is full, the journal
// holds the rest, berm_otlp_lag_seconds says how far behind the export is, and once the
// collector runs again every call arrives, once, and nothing was dropped.
func TestAStalledCollectorHoldsTheCallsInTheJournalAndTheLagSaysHowFarBehind(t *testing.T) {
	c := otelcol.ForTest(t)
	t.Cleanup(func() { _ = c.Resume() }) // before Down: a stopped collector does not flush
	n := newNode(t)
	// One export waits through the stall (no timeout, no retry: a retried request the stalled
	// collector had buffered would arrive twice).
	stop, x := n.run(Config{Endpoint: c.GRPC, Queue: 2, Batch: 1, Timeout: 10 * time.Minute})
	defer stop()
	n.call("stall-first")
	waitSpans(t, c, 1)
	if lag := x.lagSeconds(); lag != 0 {
		t.Fatalf("lag %v with nothing waiting, want 0", lag)
	}
	if err := c.Stall(); err != nil {
		t.Fatal(err)
	}
	const behind = 8
	for i := 0; i < behind; i++ {
		n.call(fmt.Sprintf("stall-%d", i))
	}
	// One in flight, two queued, one more read and waiting for room: the rest stay unread.
	deadline := time.Now().Add(time.Minute)
	for testutil.ToFloat64(x.m.queued) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the follower did not fill the queue: %v queued", testutil.ToFloat64(x.m.queued))
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // a follower that did not wait would read on meanwhile
	if q := testutil.ToFloat64(x.m.queued); q != 3 {
		t.Errorf("%v calls read ahead of a stalled export, want 3 (one in flight excluded): the follower must wait", q)
	}
	// the calls ended a minute ago (newNode's clock): the lag counts from there
	if lag := x.lagSeconds(); lag < 59 {
		t.Errorf("lag %v s while the collector stalls, want at least the minute since the oldest call ended", lag)
	}
	mfs, err := x.cfg.Registry.(*prometheus.Registry).Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "berm_otlp_lag_seconds" && mf.GetMetric()[0].GetGauge().GetValue() > 0 {
			found = true
		}
	}
	if !found {
		t.Error("berm_otlp_lag_seconds is not in the registry, or 0 while the collector stalls")
	}
	if err := c.Resume(); err != nil {
		t.Fatal(err)
	}
	spans := waitSpans(t, c, 1+behind)
	time.Sleep(300 * time.Millisecond) // a duplicate would land meanwhile
	if spans, _, _ = c.Read(); len(spans) != 1+behind {
		t.Errorf("%d spans after the stall, want %d", len(spans), 1+behind)
	}
	names := spanNames(spans)
	for i := 0; i < behind; i++ {
		if id := fmt.Sprintf("stall-%d", i); names[id] != 1 {
			t.Errorf("call %s exported %d times, want once", id, names[id])
		}
	}
	for _, sig := range []string{"spans", "logs"} {
		for _, reason := range []string{"rejected", "undelivered"} {
			if d := testutil.ToFloat64(x.m.dropped.WithLabelValues(sig, reason)); d != 0 {
				t.Errorf("%v %s dropped (%s) across a stall, want none", d, sig, reason)
			}
		}
	}
	for deadline := time.Now().Add(time.Minute); x.lagSeconds() != 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("lag %v after every call was exported, want 0", x.lagSeconds())
		}
	}
}
