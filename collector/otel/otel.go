// Package otel exports berm's calls over OTLP: one span per call, execute_tool {tool}, with the
// OpenTelemetry GenAI attributes (gen_ai.operation.name, gen_ai.tool.name, gen_ai.tool.call.id)
// and berm's, the call's denials, alerts and approvals as span events, and its alerts as log
// records too, in the call's trace. The calls come from the node's journal, followed from a
// cursor kept beside it: none is lost to a collector that is down (the journal holds them) and
// none is exported twice after a restart. README.md beside this file has the mapping and the
// delivery rules.
package otel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/journal"
)

// Protocols an exporter speaks.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// Config configures an Exporter.
type Config struct {
	StateDir string // the journal is StateDir/journal; the cursor StateDir/otel.cursor
	Endpoint string // the collector's OTLP receiver, HOST:PORT
	Protocol string // ProtocolGRPC (default) or ProtocolHTTP (POST /v1/traces, /v1/logs)
	Hostname string // host.name of the resource
	Version  string // service.version of the resource
	Registry prometheus.Registerer
	Logger   *slog.Logger
	// Queue bounds the calls read ahead of export (default 1024); the follower waits when it is
	// full, so the journal, not memory, holds a backlog: nothing is dropped for a full queue,
	// and berm_otlp_lag_seconds says how far behind the export is.
	Queue int
	Batch int // spans per export request at most (default 256)
	// EventsPerCall bounds the span events (and alert log records) kept for one call (default
	// 128); the rest are counted: in the span's dropped_events_count and in
	// berm_otlp_dropped_total{signal="span_events"}.
	EventsPerCall int
	// OpenCalls bounds the calls, begun and not ended, whose events are held (default 4096);
	// past it the oldest one's are let go and counted (reason open_calls).
	OpenCalls int
	// Attempts bounds the tries of one export (default 8, backoff doubling from Backoff to
	// 30 s); past it the batch is dropped and counted (reason undelivered).
	Attempts int
	Backoff  time.Duration // default 250 ms
	Timeout  time.Duration // one export's deadline (default 10 s)
	Poll     time.Duration // how often the journal is read for new records (default 200 ms)
}

// Exporter follows the journal and exports each ended call.
type Exporter struct {
	cfg    Config
	log    *slog.Logger
	m      metrics
	cursor string
	start  cursor
	res    *resourcepb.Resource
	conn   *grpc.ClientConn
	traces coltracepb.TraceServiceClient
	logs   collogspb.LogsServiceClient
	client *http.Client
	// oldest is the end (unix ns) of the oldest call read and not yet exported, 0 when none
	// is: the head of the batch in flight (the follower reads the journal in order).
	oldest atomic.Int64
}

type metrics struct {
	exported, failures, dropped *prometheus.CounterVec
	queued                      prometheus.Gauge
	lag                         prometheus.GaugeFunc
}

// New checks cfg, registers the exporter's metrics and finds where export starts: the saved
// cursor, else the journal's end (a node with history exports what comes next).
func New(cfg Config) (*Exporter, error) {
	if _, _, err := net.SplitHostPort(cfg.Endpoint); err != nil {
		return nil, fmt.Errorf("otlp: endpoint %q: expected HOST:PORT: %w", cfg.Endpoint, err)
	}
	switch cfg.Protocol {
	case "":
		cfg.Protocol = ProtocolGRPC
	case ProtocolGRPC, ProtocolHTTP:
	default:
		return nil, fmt.Errorf("otlp: protocol %q: expected %s or %s", cfg.Protocol, ProtocolGRPC, ProtocolHTTP)
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&cfg.Queue, 1024)
	def(&cfg.Batch, 256)
	def(&cfg.EventsPerCall, 128)
	def(&cfg.OpenCalls, 4096)
	def(&cfg.Attempts, 8)
	if cfg.Backoff <= 0 {
		cfg.Backoff = 250 * time.Millisecond
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 200 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	x := &Exporter{cfg: cfg, log: cfg.Logger, cursor: filepath.Join(cfg.StateDir, "otel.cursor")}
	x.m = metrics{
		exported: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "berm_otlp_exported_total", Help: "Spans and log records the OTLP collector accepted."}, []string{"signal"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "berm_otlp_export_failures_total", Help: "OTLP exports that failed and were tried again."}, []string{"signal"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "berm_otlp_dropped_total",
			Help: "Spans, span events and log records never exported: refused by the collector (rejected), failed every attempt (undelivered), past a call's bound (per_call_bound) or the open calls' bound (open_calls)."},
			[]string{"signal", "reason"}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{Name: "berm_otlp_queued", Help: "Calls read from the journal and not yet exported."}),
	}
	x.m.lag = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "berm_otlp_lag_seconds",
		Help: "Seconds since the oldest call not yet exported ended (0: none waits). A full queue makes the exporter wait, not drop: the journal holds the calls behind it."},
		x.lagSeconds)
	saved, err := x.loadCursor()
	if err != nil {
		return nil, err
	}
	if saved != nil {
		x.start = *saved
	} else {
		end, err := journal.Scan(filepath.Join(cfg.StateDir, "journal"), journal.Position{}, func(journal.Record) error { return nil })
		if err != nil {
			return nil, fmt.Errorf("otlp: read journal: %w", err)
		}
		x.start = cursor{Resume: end.End, After: end.End}
	}
	x.res = &resourcepb.Resource{Attributes: []*commonpb.KeyValue{str("service.name", "bermd"), str("host.name", cfg.Hostname)}}
	if cfg.Version != "" {
		x.res.Attributes = append(x.res.Attributes, str("service.version", cfg.Version))
	}
	if cfg.Protocol == ProtocolGRPC {
		// Plain text: the collector is expected on the node or its pod network (see README).
		// A collector back up is found within seconds: gRPC's reconnect backoff would otherwise
		// grow to two minutes while it is down.
		cp := grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: 5 * time.Second}
		cp.Backoff.BaseDelay, cp.Backoff.MaxDelay = 100*time.Millisecond, 5*time.Second
		if x.conn, err = grpc.NewClient(cfg.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithConnectParams(cp)); err != nil {
			return nil, fmt.Errorf("otlp: %w", err)
		}
		x.traces = coltracepb.NewTraceServiceClient(x.conn)
		x.logs = collogspb.NewLogsServiceClient(x.conn)
	} else {
		x.client = &http.Client{Timeout: cfg.Timeout}
	}
	if cfg.Registry != nil {
		for _, c := range []prometheus.Collector{x.m.exported, x.m.failures, x.m.dropped, x.m.queued, x.m.lag} {
			if err := cfg.Registry.Register(c); err != nil {
				x.Close()
				return nil, fmt.Errorf("otlp metrics: %w", err)
			}
		}
	}
	return x, nil
}

// Close releases the connection to the collector.
func (x *Exporter) Close() error {
	if x.conn != nil {
		return x.conn.Close()
	}
	return nil
}

// cursor is where export resumes. The journal is read again from Resume (the CallStart of the
// oldest call still open when the cursor was written, so its events are gathered again), and
// a CallEnd is exported only from After on (every one before it was exported already).
type cursor struct {
	Resume journal.Position `json:"resume"`
	After  journal.Position `json:"after"`
}

type item struct {
	span *tracepb.Span
	logs []*logspb.LogRecord
	at   cursor    // the cursor once this call is exported
	call string    // TENANT/CALL_ID, for the log line of a drop
	end  time.Time // when the call ended, for the lag
}

// lagSeconds is berm_otlp_lag_seconds: how long the oldest call not yet exported has waited
// since it ended.
func (x *Exporter) lagSeconds() float64 {
	ns := x.oldest.Load()
	if ns == 0 {
		return 0
	}
	return max(time.Since(time.Unix(0, ns)).Seconds(), 0)
}

// open is a call begun and not yet ended: what its span will carry.
type open struct {
	start   journal.Position
	call    *event.CallStart
	events  []*tracepb.Span_Event
	alerts  []*event.Event
	dropped uint32
}

// Run follows the journal and exports until ctx ends.
func (x *Exporter) Run(ctx context.Context) error {
	q := make(chan item, x.cfg.Queue)
	errc := make(chan error, 1)
	go func() { errc <- x.follow(ctx, x.start, q) }()
	var batch []item
	for {
		batch = batch[:0]
		select {
		case it := <-q:
			batch = append(batch, it)
		case err := <-errc:
			return err
		case <-ctx.Done():
			return nil
		}
	more:
		for len(batch) < x.cfg.Batch {
			select {
			case it := <-q:
				batch = append(batch, it)
			default:
				break more
			}
		}
		x.m.queued.Sub(float64(len(batch)))
		x.oldest.Store(max(batch[0].end.UnixNano(), 1))
		x.export(ctx, batch)
		x.oldest.Store(0)
		if ctx.Err() != nil {
			return nil // not saved: the batch goes again after a restart
		}
		if err := x.saveCursor(batch[len(batch)-1].at); err != nil {
			x.log.Error("otlp: save cursor", "err", err)
		}
	}
}

func (x *Exporter) follow(ctx context.Context, from cursor, q chan<- item) error {
	opens := map[string]*open{}
	err := journal.Follow(ctx, filepath.Join(x.cfg.StateDir, "journal"), from.Resume, x.cfg.Poll, func(rec journal.Record) error {
		switch rec.Type {
		case journal.TypeCallStart:
			s, err := journal.DecodeCallStart(rec.Payload)
			if err != nil {
				x.log.Warn("otlp: undecodable journal record skipped", "pos", rec.Pos.String(), "err", err)
				return nil
			}
			x.opened(opens, s.Key(), rec.Pos).call = s
		case journal.TypeEvents:
			if !carriesSpanEvents(rec.Payload) {
				return nil
			}
			batch, err := journal.DecodeEvents(rec.Payload)
			if err != nil {
				x.log.Warn("otlp: undecodable journal record skipped", "pos", rec.Pos.String(), "err", err)
				return nil
			}
			for i := range batch {
				e := &batch[i]
				se, ok := SpanEvent(e)
				if !ok {
					continue
				}
				o := x.opened(opens, e.Key(), rec.Pos)
				if len(o.events) >= x.cfg.EventsPerCall {
					o.dropped++
					x.m.dropped.WithLabelValues("span_events", "per_call_bound").Inc()
					if e.Kind == event.KindAlert {
						x.m.dropped.WithLabelValues("logs", "per_call_bound").Inc()
					}
					continue
				}
				o.events = append(o.events, se)
				if e.Kind == event.KindAlert {
					o.alerts = append(o.alerts, e)
				}
			}
		case journal.TypeCallEnd:
			r, err := journal.DecodeCallEnd(rec.Payload)
			if err != nil {
				x.log.Warn("otlp: undecodable journal record skipped", "pos", rec.Pos.String(), "err", err)
				return nil
			}
			o := opens[r.Key()]
			delete(opens, r.Key())
			if rec.Pos.Less(from.After) {
				return nil // exported before the restart
			}
			if o == nil {
				o = &open{}
			}
			it := item{span: Span(r, o.events, o.dropped), call: r.Tenant + "/" + r.CallID, end: r.End}
			now := time.Now()
			for _, a := range o.alerts {
				it.logs = append(it.logs, AlertLog(a, &r.CallStart, now))
			}
			it.at = cursor{Resume: rec.Next, After: rec.Next}
			for _, o := range opens {
				if o.start.Less(it.at.Resume) {
					it.at.Resume = o.start
				}
			}
			x.m.queued.Inc()
			select {
			case q <- it:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("otlp: read journal: %w", err)
	}
	return nil
}

// spanEventKinds are the kinds of the events a span carries, as the journal's JSON writes them.
var spanEventKinds = [][]byte{[]byte(`"kind":"denial"`), []byte(`"kind":"alert"`), []byte(`"kind":"approval"`)}

// carriesSpanEvents says whether a journal record of events may hold one a span carries: one
// that holds none (execs, opens, connects only) is not decoded. A tool's string cannot hide a
// real event's kind: inside a JSON string the quotes are escaped, so a real kind always matches.
func carriesSpanEvents(p []byte) bool {
	for _, k := range spanEventKinds {
		if bytes.Contains(p, k) {
			return true
		}
	}
	return false
}

// opened is the open call keyed key, begun at pos when it is new. Past the bound on open calls
// the oldest is let go: its span, at its end, carries no events, and they are counted.
func (x *Exporter) opened(opens map[string]*open, key string, pos journal.Position) *open {
	if o := opens[key]; o != nil {
		return o
	}
	if len(opens) >= x.cfg.OpenCalls {
		var oldest string
		for k, o := range opens {
			if oldest == "" || o.start.Less(opens[oldest].start) {
				oldest = k
			}
		}
		x.m.dropped.WithLabelValues("span_events", "open_calls").Add(float64(len(opens[oldest].events)))
		delete(opens, oldest)
	}
	o := &open{start: pos}
	opens[key] = o
	return o
}

// export sends the batch's spans, then its log records, each again with backoff while the
// collector fails, until taken, refused for good or out of attempts.
func (x *Exporter) export(ctx context.Context, batch []item) {
	spans := make([]*tracepb.Span, 0, len(batch))
	var logs []*logspb.LogRecord
	for _, it := range batch {
		spans = append(spans, it.span)
		logs = append(logs, it.logs...)
	}
	scope := &commonpb.InstrumentationScope{Name: "github.com/bermsec/berm/collector/otel", Version: x.cfg.Version}
	treq := &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{Resource: x.res, ScopeSpans: []*tracepb.ScopeSpans{{Scope: scope, Spans: spans}}}}}
	calls := make([]string, 0, len(batch))
	for _, it := range batch {
		calls = append(calls, it.call)
	}
	x.retry(ctx, "spans", calls, func(ctx context.Context) (int64, error) {
		if x.traces != nil {
			resp, err := x.traces.Export(ctx, treq)
			return resp.GetPartialSuccess().GetRejectedSpans(), err
		}
		var resp coltracepb.ExportTraceServiceResponse
		err := x.post(ctx, "/v1/traces", treq, &resp)
		return resp.GetPartialSuccess().GetRejectedSpans(), err
	})
	if len(logs) == 0 || ctx.Err() != nil {
		return
	}
	lreq := &collogspb.ExportLogsServiceRequest{ResourceLogs: []*logspb.ResourceLogs{{Resource: x.res, ScopeLogs: []*logspb.ScopeLogs{{Scope: scope, LogRecords: logs}}}}}
	var alerted []string
	for _, it := range batch {
		for range it.logs {
			alerted = append(alerted, it.call)
		}
	}
	x.retry(ctx, "logs", alerted, func(ctx context.Context) (int64, error) {
		if x.logs != nil {
			resp, err := x.logs.Export(ctx, lreq)
			return resp.GetPartialSuccess().GetRejectedLogRecords(), err
		}
		var resp collogspb.ExportLogsServiceResponse
		err := x.post(ctx, "/v1/logs", lreq, &resp)
		return resp.GetPartialSuccess().GetRejectedLogRecords(), err
	})
}

// errPermanent marks a refusal that trying again will not change.
var errPermanent = errors.New("refused")

// retry sends one request of signal, whose items belong to calls (TENANT/CALL_ID, one per
// item): a drop's log line names them.
func (x *Exporter) retry(ctx context.Context, signal string, calls []string, send func(context.Context) (rejected int64, err error)) {
	n := len(calls)
	wait := x.cfg.Backoff
	for attempt := 1; ; attempt++ {
		tctx, cancel := context.WithTimeout(ctx, x.cfg.Timeout)
		rejected, err := send(tctx)
		cancel()
		if err == nil {
			rejected = min(max(rejected, 0), int64(n))
			x.m.exported.WithLabelValues(signal).Add(float64(int64(n) - rejected))
			if rejected > 0 {
				x.m.dropped.WithLabelValues(signal, "rejected").Add(float64(rejected))
				x.log.Warn("otlp: the collector refused part of an export", "signal", signal, "rejected", rejected, "calls", named(calls))
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		if !retryable(err) {
			x.m.dropped.WithLabelValues(signal, "rejected").Add(float64(n))
			x.log.Error("otlp: the collector refused an export", "signal", signal, "n", n, "calls", named(calls), "err", err)
			return
		}
		x.m.failures.WithLabelValues(signal).Inc()
		if attempt >= x.cfg.Attempts {
			x.m.dropped.WithLabelValues(signal, "undelivered").Add(float64(n))
			x.log.Error("otlp: export dropped after every attempt failed", "signal", signal, "n", n, "calls", named(calls), "attempts", attempt, "err", err)
			return
		}
		x.log.Warn("otlp: export failed, trying again", "signal", signal, "attempt", attempt, "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// namedMax bounds the calls one log line names (a batch holds up to 256).
const namedMax = 32

// named is the calls of a dropped request for its log line: each once, at most namedMax, then
// how many more.
func named(calls []string) string {
	var out []string
	seen := map[string]bool{}
	for _, c := range calls {
		if seen[c] {
			continue
		}
		seen[c] = true
		if len(out) < namedMax {
			out = append(out, c)
		}
	}
	s := strings.Join(out, " ")
	if len(seen) > namedMax {
		s += fmt.Sprintf(" and %d more", len(seen)-namedMax)
	}
	return s
}

// retryable follows OTLP's rules: for gRPC the codes it names as transient, for HTTP 429, 502,
// 503 and 504 (and a failed connection for both).
func retryable(err error) bool {
	if errors.Is(err, errPermanent) {
		return false
	}
	if s, ok := status.FromError(err); ok {
		switch s.Code() {
		case codes.Canceled, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.OutOfRange, codes.Unavailable, codes.DataLoss:
			return true
		}
		return false
	}
	return true
}

func (x *Exporter) post(ctx context.Context, path string, req, resp proto.Message) error {
	body, err := proto.Marshal(req)
	if err != nil {
		return fmt.Errorf("%w: encode: %v", errPermanent, err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+x.cfg.Endpoint+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: %v", errPermanent, err)
	}
	hreq.Header.Set("Content-Type", "application/x-protobuf")
	hreq.Header.Set("User-Agent", "bermd")
	hr, err := x.client.Do(hreq)
	if err != nil {
		return err
	}
	defer hr.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(hr.Body, 1<<20))
	switch {
	case hr.StatusCode == http.StatusOK:
		_ = proto.Unmarshal(b, resp)
		return nil
	case hr.StatusCode == http.StatusTooManyRequests || hr.StatusCode == http.StatusBadGateway || hr.StatusCode == http.StatusServiceUnavailable || hr.StatusCode == http.StatusGatewayTimeout:
		return fmt.Errorf("http status %d", hr.StatusCode)
	}
	return fmt.Errorf("%w: http status %d", errPermanent, hr.StatusCode)
}

func (x *Exporter) loadCursor() (*cursor, error) {
	b, err := os.ReadFile(x.cursor)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("otlp: read cursor: %w", err)
	}
	var c cursor
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("otlp: cursor %s: %w", x.cursor, err)
	}
	return &c, nil
}

// saveCursor writes the cursor whole or not at all (a new file renamed over the old).
func (x *Exporter) saveCursor(c cursor) error {
	b, _ := json.Marshal(c)
	tmp := x.cursor + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, x.cursor)
}
