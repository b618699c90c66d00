package otel

import (
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/bermsec/berm/agent/event"
)

// OperationName is gen_ai.operation.name of a call's span.
const OperationName = "execute_tool"

// ToolType is gen_ai.tool.type: berm's tools run on the agent's side, not the model's.
const ToolType = "extension"

// maxString bounds every string attribute (a path, an alert's output): what a tool names can be
// long, and a collector refuses or truncates oversized attributes anyway.
const maxString = 4096

// IDs are a call's trace and span ids. The span id, and the trace id of a call without a
// traceparent, are derived from the call's key: a span exported twice (a crash between an export
// and its cursor's write) has the same ids both times, so a backend can tell the copy.
func IDs(s *event.CallStart) (traceID, spanID, parentID []byte, flags uint32) {
	h := sha256.Sum256([]byte("berm span\x00" + s.Key()))
	spanID = h[:8]
	if tid, psid, f, err := event.ParseTraceParent(s.TraceParent); err == nil {
		return tid[:], spanID, psid[:], uint32(f) | uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK) | uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK)
	}
	t := sha256.Sum256([]byte("berm trace\x00" + s.Key()))
	return t[:16], spanID, nil, 1 | uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK) // sampled, a root
}

// Span is the call's execute_tool span: rec's start and end, the GenAI attributes and berm's,
// with events (denials, alerts, approvals) and how many were left out.
func Span(rec *event.CallRecord, events []*tracepb.Span_Event, droppedEvents uint32) *tracepb.Span {
	traceID, spanID, parentID, flags := IDs(&rec.CallStart)
	attrs := []*commonpb.KeyValue{
		str("gen_ai.operation.name", OperationName),
		str("gen_ai.tool.name", rec.Tool),
		str("gen_ai.tool.call.id", rec.CallID),
		str("gen_ai.tool.type", ToolType),
		str("berm.tenant", rec.Tenant),
		str("berm.call.key", rec.Key()),
		str("berm.policy", rec.Policy),
		str("berm.mode", rec.Mode),
		str("berm.end_reason", string(rec.EndReason)),
		boolean("berm.complete", rec.Complete),
		integer("berm.exit_status", int64(rec.ExitStatus)),
		integer("berm.exit_code", int64(rec.ExitCode)),
		integer("berm.events", int64(rec.Events)),
		integer("berm.syscalls", int64(rec.SyscallTotal)),
		integer("berm.cpu_time_ns", int64(rec.CPUTimeNs)),
		integer("berm.peak_memory_bytes", int64(rec.PeakMemory)),
		integer("berm.output_bytes", rec.OutputBytes),
		integer("berm.dropped.kernel", int64(rec.Dropped.Kernel)),
		integer("berm.dropped.user", int64(rec.Dropped.User)),
	}
	c := rec.Counts
	for _, n := range []struct {
		k string
		v uint64
	}{{"exec", c.Exec}, {"fork", c.Fork}, {"exit", c.Exit}, {"open", c.Open}, {"connect", c.Connect}, {"syscall", c.Syscall}, {"denial", c.Denial}, {"alert", c.Alert}, {"dns", c.DNS}} {
		attrs = append(attrs, integer("berm.count."+n.k, int64(n.v)))
	}
	if rec.ExitSignal != 0 {
		attrs = append(attrs, integer("berm.exit_signal", int64(rec.ExitSignal)))
	}
	if rec.IncompleteReason != "" {
		attrs = append(attrs, str("berm.incomplete_reason", rec.IncompleteReason))
	}
	if rec.EndDetail != "" {
		attrs = append(attrs, str("berm.end_detail", rec.EndDetail))
	}
	status := &tracepb.Status{Code: tracepb.Status_STATUS_CODE_UNSET}
	if rec.EndReason != event.EndExit || rec.ExitStatus != 0 {
		// error.type is low in cardinality: why berm ended the call, or that the tool failed.
		et := string(rec.EndReason)
		if rec.EndReason == event.EndExit {
			et = "exit_status"
		}
		attrs = append(attrs, str("error.type", et))
		status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: safe(fmt.Sprintf("%s (exit status %d)", rec.EndReason, rec.ExitStatus))}
	}
	end := rec.End
	if end.Before(rec.Start) {
		end = rec.Start
	}
	return &tracepb.Span{
		TraceId: traceID, SpanId: spanID, ParentSpanId: parentID, Flags: flags,
		Name:               "execute_tool " + safe(rec.Tool),
		Kind:               tracepb.Span_SPAN_KIND_INTERNAL,
		StartTimeUnixNano:  unixNano(rec.Start),
		EndTimeUnixNano:    unixNano(end),
		Attributes:         attrs,
		Events:             events,
		DroppedEventsCount: droppedEvents,
		Status:             status,
	}
}

// SpanEvent is e as an event of its call's span, when it is a denial, an alert or an approval.
func SpanEvent(e *event.Event) (*tracepb.Span_Event, bool) {
	var name string
	var attrs []*commonpb.KeyValue
	switch {
	case e.Kind == event.KindDenial && e.Denial != nil:
		d := e.Denial
		name = "berm.denial"
		attrs = []*commonpb.KeyValue{str("berm.denial.layer", d.Layer), str("berm.surface", d.Surface), str("berm.rule", d.Rule), str("berm.object", d.Object), boolean("berm.audit", d.Audit)}
	case e.Kind == event.KindAlert && e.Alert != nil:
		a := e.Alert
		name = "berm.alert"
		attrs = alertAttrs(a)
	case e.Kind == event.KindApproval && e.Approval != nil:
		a := e.Approval
		name = "berm.approval"
		attrs = []*commonpb.KeyValue{str("berm.approval.outcome", a.Outcome), str("berm.approval.id", a.ID), str("berm.approval.action", a.Action),
			str("berm.approval.syscall", a.Syscall), str("berm.object", a.Object), str("berm.rule", a.Rule), integer("berm.approval.result", a.Result)}
		if a.By != "" {
			attrs = append(attrs, str("berm.approval.by", a.By))
		}
		if a.Channel != "" {
			attrs = append(attrs, str("berm.approval.channel", a.Channel))
		}
		if a.LatencyNs != 0 {
			attrs = append(attrs, integer("berm.approval.latency_ns", a.LatencyNs))
		}
	default:
		return nil, false
	}
	attrs = append(attrs, integer("berm.event.seq", int64(e.Seq)), integer("process.pid", int64(e.PID)))
	if e.Exe != "" {
		attrs = append(attrs, str("process.executable.path", e.Exe))
	}
	return &tracepb.Span_Event{TimeUnixNano: unixNano(e.Time), Name: name, Attributes: attrs}, true
}

func alertAttrs(a *event.Alert) []*commonpb.KeyValue {
	attrs := []*commonpb.KeyValue{str("berm.alert.rule_id", a.RuleID), str("berm.alert.title", a.Title), str("berm.alert.severity", a.Severity),
		str("berm.surface", a.Surface), str("berm.alert.output", a.Output), integer("berm.alert.event_seq", int64(a.EventSeq))}
	if len(a.Technique) > 0 {
		vs := make([]*commonpb.AnyValue, len(a.Technique))
		for i, t := range a.Technique {
			vs[i] = &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: safe(t)}}
		}
		attrs = append(attrs, &commonpb.KeyValue{Key: "berm.alert.technique", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: vs}}}})
	}
	return attrs
}

// Severity is the OTLP severity number of a berm alert severity.
func Severity(s string) logspb.SeverityNumber {
	switch s {
	case "critical":
		return logspb.SeverityNumber_SEVERITY_NUMBER_FATAL
	case "high":
		return logspb.SeverityNumber_SEVERITY_NUMBER_ERROR
	case "medium":
		return logspb.SeverityNumber_SEVERITY_NUMBER_WARN
	case "low":
		return logspb.SeverityNumber_SEVERITY_NUMBER_INFO2
	}
	return logspb.SeverityNumber_SEVERITY_NUMBER_INFO
}

// AlertLog is an alert as an OTLP log record, in the trace of its call's span (start is the
// call's CallStart: the ids).
func AlertLog(e *event.Event, start *event.CallStart, observed time.Time) *logspb.LogRecord {
	a := e.Alert
	traceID, spanID, _, flags := IDs(start)
	attrs := append([]*commonpb.KeyValue{
		str("gen_ai.tool.name", e.Tool), str("gen_ai.tool.call.id", e.CallID),
		str("berm.tenant", e.Tenant), str("berm.call.key", e.Key()),
		integer("process.pid", int64(e.PID)),
	}, alertAttrs(a)...)
	return &logspb.LogRecord{
		TimeUnixNano:         unixNano(e.Time),
		ObservedTimeUnixNano: unixNano(observed),
		SeverityNumber:       Severity(a.Severity),
		SeverityText:         safe(a.Severity),
		EventName:            "berm.alert",
		Body:                 &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: safe(a.Title + ": " + a.Output)}},
		Attributes:           attrs,
		TraceId:              traceID,
		SpanId:               spanID,
		Flags:                flags & 0xff,
	}
}

func unixNano(t time.Time) uint64 {
	if t.IsZero() || t.UnixNano() < 0 {
		return 0
	}
	return uint64(t.UnixNano())
}

func str(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: safe(v)}}}
}

func integer(k string, v int64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
}

func boolean(k string, v bool) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v}}}
}

// safe is s as an attribute value: valid UTF-8 (protobuf refuses to marshal a string that is
// not, and one bad path would fail its whole batch), a control, format or other unprintable
// rune (a terminal escape, a bidi override) written as its Go escape, at most maxString bytes.
func safe(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean && len(s) <= maxString {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		if b.Len() >= maxString {
			b.WriteString("...")
			break
		}
		switch {
		case r == utf8.RuneError:
			if _, n := utf8.DecodeRuneInString(s[i:]); n == 1 {
				fmt.Fprintf(&b, `\x%02x`, s[i])
				continue
			}
			b.WriteRune(r)
		case unicode.IsPrint(r):
			b.WriteRune(r)
		default:
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		}
	}
	return b.String()
}
