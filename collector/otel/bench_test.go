package otel

import (
	"context"
	"fmt"
	"testing"
	"time"

	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/testenv/otelcol"
)

// BenchmarkBuildAndExportSpans is the exporter's cost per call: building a call's span (with
// two denials and an alert as span events, the alert as a log record too) and exporting it,
// in batches of 256, to a real collector on loopback over each transport (build-only: the
// spans built, not sent). The collector's own
// CPU (it shares the machine) is in the wall time, not in bermd's.
func BenchmarkBuildAndExportSpans(b *testing.B) {
	c := otelcol.ForTest(b)
	for _, tc := range []struct{ name, protocol, endpoint string }{{"build-only", ProtocolGRPC, c.GRPC}, {"grpc", ProtocolGRPC, c.GRPC}, {"http-protobuf", ProtocolHTTP, c.HTTP}} {
		b.Run(tc.name, func(b *testing.B) {
			x, err := New(Config{StateDir: b.TempDir(), Endpoint: tc.endpoint, Protocol: tc.protocol})
			if err != nil {
				b.Fatal(err)
			}
			defer x.Close()
			t0 := time.Now()
			batch := make([]item, 0, 256)
			flush := func() {
				if tc.name != "build-only" {
					x.export(context.Background(), batch)
				}
				batch = batch[:0]
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				s := event.CallStart{CallID: fmt.Sprintf("c%d", i), CallKey: fmt.Sprintf("k%d", i), Tool: "grep", Tenant: "acme", Start: t0}
				rec := &event.CallRecord{CallStart: s, End: t0.Add(time.Second), EndReason: event.EndExit, Complete: true}
				var evs []*tracepb.Span_Event
				var alert *event.Event
				for j, e := range []event.Event{
					{Kind: event.KindDenial, Seq: 1, Time: t0, Denial: &event.Denial{Layer: "landlock", Surface: "isolation", Rule: "fs", Object: "/etc/shadow"}},
					{Kind: event.KindDenial, Seq: 2, Time: t0, Denial: &event.Denial{Layer: "seccomp", Surface: "isolation", Rule: "ptrace", Object: "ptrace"}},
					{Kind: event.KindAlert, Seq: 3, Time: t0, Alert: &event.Alert{RuleID: "credential-system-files", Title: "t", Severity: "high", Output: "cat read /etc/shadow"}},
				} {
					e.CallID, e.CallKey, e.Tool, e.Tenant = s.CallID, s.CallKey, s.Tool, s.Tenant
					se, _ := SpanEvent(&e)
					evs = append(evs, se)
					if j == 2 {
						alert = &e
					}
				}
				batch = append(batch, item{span: Span(rec, evs, 0), logs: []*logspb.LogRecord{AlertLog(alert, &s, t0)}})
				if len(batch) == cap(batch) {
					flush()
				}
			}
			if len(batch) > 0 {
				flush()
			}
		})
	}
}
