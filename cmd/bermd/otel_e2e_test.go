package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bermsec/berm/testenv/bermbin"
	"github.com/bermsec/berm/testenv/otelcol"
)

// Real calls through bermd reach a real OpenTelemetry Collector as one execute_tool span each,
// with the GenAI attributes, the denial of /etc/shadow as a span event, the caller's
// traceparent as the parent, and the alert as a log record in the call's trace.
func TestDaemonExportsEachCallAsAnOTLPSpan(t *testing.T) {
	bermbin.RequireRoot(t)
	c := otelcol.ForTest(t)
	d := startDaemon(t, "--no-rules=false", "--otlp-endpoint", c.GRPC)
	ws := bermbin.Workspace(t)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if r := d.run(t, "", "--call-id", "plain", "--tool", "lister", "--workspace", ws, "--", "true"); r.Exit != 0 {
		t.Fatalf("berm run: exit %d: %s", r.Exit, r.Stderr)
	}
	if r := d.run(t, "", "--call-id", "shadow", "--tool", "reader", "--traceparent", tp, "--workspace", ws, "--", "sh", "-c", "cat /etc/shadow 2>/dev/null; exit 0"); r.Exit != 0 {
		t.Fatalf("berm run: exit %d: %s", r.Exit, r.Stderr)
	}
	var (
		spans []otelcol.Span
		logs  []otelcol.Log
		err   error
	)
	deadline := time.Now().Add(time.Minute) // a bound on a hang, not a speed assertion
	for {
		spans, logs, err = c.Read()
		if err == nil && len(spans) >= 2 && len(logs) >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the collector holds %d spans and %d logs (err %v), want 2 and 1\n%s", len(spans), len(logs), err, c.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	byID := map[string]otelcol.Span{}
	for _, s := range spans {
		id, _ := s.Attributes.Get("gen_ai.tool.call.id")
		if _, dup := byID[id]; dup {
			t.Errorf("call %s exported twice", id)
		}
		byID[id] = s
	}
	for id, tool := range map[string]string{"plain": "lister", "shadow": "reader"} {
		s, ok := byID[id]
		if !ok {
			t.Fatalf("no span for call %s", id)
		}
		want := map[string]string{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool, "gen_ai.tool.call.id": id,
			"berm.tenant": "default", "berm.end_reason": "exit", "berm.complete": "true", "berm.exit_status": "0"}
		for k, v := range want {
			if got, _ := s.Attributes.Get(k); got != v {
				t.Errorf("span of %s: %s = %q, want %q", id, k, got, v)
			}
		}
		if s.Name != "execute_tool "+tool {
			t.Errorf("span name %q", s.Name)
		}
		if key, _ := s.Attributes.Get("berm.call.key"); key == "" {
			t.Errorf("span of %s has no berm.call.key", id)
		}
		start, _ := strconv.ParseUint(s.StartTimeUnixNano, 10, 64)
		end, _ := strconv.ParseUint(s.EndTimeUnixNano, 10, 64)
		if start == 0 || end <= start {
			t.Errorf("span of %s: start %s, end %s", id, s.StartTimeUnixNano, s.EndTimeUnixNano)
		}
	}
	plain, shadow := byID["plain"], byID["shadow"]
	if plain.ParentSpanID != "" {
		t.Errorf("the call without a traceparent has a parent %q", plain.ParentSpanID)
	}
	if shadow.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || shadow.ParentSpanID != "00f067aa0ba902b7" {
		t.Errorf("the call with a traceparent: trace %q parent %q, want the traceparent's", shadow.TraceID, shadow.ParentSpanID)
	}
	var denied, alerted bool
	for _, e := range shadow.Events {
		obj, _ := e.Attributes.Get("berm.object")
		switch {
		case e.Name == "berm.denial" && strings.Contains(obj, "shadow"):
			denied = true
		case e.Name == "berm.alert":
			if r, _ := e.Attributes.Get("berm.alert.rule_id"); r == "credential-system-files" {
				alerted = true
			}
		}
	}
	if !denied || !alerted {
		t.Errorf("the span of the call that read /etc/shadow: denial event %v, alert event %v; events %+v", denied, alerted, shadow.Events)
	}
	var logged bool
	for _, l := range logs {
		if r, _ := l.Attributes.Get("berm.alert.rule_id"); r == "credential-system-files" {
			logged = true
			if l.TraceID != shadow.TraceID || l.SpanID != shadow.SpanID || l.EventName != "berm.alert" {
				t.Errorf("the alert's log record: trace %q span %q event %q, want the call's span", l.TraceID, l.SpanID, l.EventName)
			}
		}
	}
	if !logged {
		t.Errorf("no log record for the alert: %+v", logs)
	}
	if v := d.metric(t, `berm_otlp_exported_total{signal="spans"}`); v != 2 {
		t.Errorf("berm_otlp_exported_total{spans} = %v, want 2", v)
	}
	if v := d.metric(t, `berm_otlp_exported_total{signal="logs"}`); v < 1 {
		t.Errorf("berm_otlp_exported_total{logs} = %v, want the alert's", v)
	}
}

// A traceparent not in W3C's format is refused before the call runs, naming the flag.
func TestBermRunRefusesAMalformedTraceparent(t *testing.T) {
	d := startDaemon(t)
	ws := bermbin.Workspace(t)
	for _, tp := range []string{
		"garbage",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", // uppercase
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01", // zero trace id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", // zero span id
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // version ff
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
	} {
		r := d.run(t, "", "--call-id", "badtp", "--traceparent", tp, "--workspace", ws, "--", "true")
		if r.Exit == 0 || !strings.Contains(r.Stderr, "--traceparent") {
			t.Errorf("--traceparent %q: exit %d, stderr %q; want a refusal naming the flag", tp, r.Exit, r.Stderr)
		}
	}
}
