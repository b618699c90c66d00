// Package falco routes berm's alerts to anything that reads Falco's HTTP output: each alert is
// POSTed as the JSON Falco writes (rule, priority, output, output_fields, time, hostname, tags,
// source, uuid), so falcosidekick and its fan-out (Slack, PagerDuty, Loki, Kafka, ...) take it
// unchanged. The alerts come from the node's journal, followed from a cursor kept beside it:
// none is lost to a receiver that is down (the journal holds them) and none is sent twice
// after a restart. README.md beside this file has the shape and the delivery rules.
package falco

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/journal"
)

// Payload is one alert as Falco writes it (json_output with json_include_output_property and
// json_include_tags_property).
type Payload struct {
	UUID         string         `json:"uuid"`
	Output       string         `json:"output"`
	Priority     string         `json:"priority"`
	Rule         string         `json:"rule"`
	Time         time.Time      `json:"time"`
	Source       string         `json:"source"`
	OutputFields map[string]any `json:"output_fields"`
	Hostname     string         `json:"hostname"`
	Tags         []string       `json:"tags"`
}

// Source is what Falco's source field says for berm's alerts.
const Source = "berm"

// Priority is Falco's priority for a berm severity.
func Priority(severity string) string {
	switch severity {
	case "critical":
		return "Critical"
	case "high":
		return "Error"
	case "medium":
		return "Warning"
	case "low":
		return "Notice"
	}
	return "Informational"
}

// FromAlert is e's Falco payload (e must be an alert). The output is printable ASCII whatever
// the tool put in the names it matched: a control byte, an escape sequence or a non-ASCII rune
// is written as its Go escape, so no receiver's terminal or chat renders what a tool drew.
func FromAlert(e *event.Event, hostname string) Payload {
	a := e.Alert
	tags := []string{"berm", "surface." + a.Surface}
	tags = append(tags, a.Technique...)
	return Payload{
		UUID:     uuidOf(e),
		Output:   printable(fmt.Sprintf("%s (call=%s tenant=%s tool=%s) %s", a.Title, e.CallID, e.Tenant, e.Tool, a.Output)),
		Priority: Priority(a.Severity),
		Rule:     printable(a.RuleID),
		Time:     e.Time.UTC(),
		Source:   Source,
		Hostname: hostname,
		Tags:     tags,
		OutputFields: map[string]any{
			"berm.call.id":    e.CallID,
			"berm.call.key":   e.Key(),
			"berm.tenant":     e.Tenant,
			"berm.tool":       e.Tool,
			"berm.severity":   a.Severity,
			"berm.surface":    a.Surface,
			"berm.title":      a.Title,
			"berm.event.seq":  a.EventSeq,
			"evt.time":        e.Time.UnixNano(),
			"proc.pid":        e.PID,
			"proc.ppid":       e.PPID,
			"proc.exepath":    e.Exe,
			"proc.name":       e.Comm,
			"user.uid":        e.UID,
			"container.id":    e.Key(),
			"container.name":  e.Tool,
			"k8s.ns.name":     e.Tenant,
			"k8s.pod.name":    e.CallID,
			"berm.alert.text": a.Output,
		},
	}
}

// uuidOf is a stable id of the alert, the same on every delivery of it: a receiver dedupes on
// it (delivery is at least once across a crash between a POST and its cursor's write).
func uuidOf(e *event.Event) string {
	h := sha256.Sum256([]byte(e.ID()))
	h[6] = h[6]&0x0f | 0x50 // version 5-like: name-based
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

func printable(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r < 0x80 && unicode.IsPrint(r) {
			b.WriteRune(r)
			continue
		}
		q := strconv.QuoteToASCII(string(r))
		b.WriteString(q[1 : len(q)-1])
	}
	return b.String()
}

// Sign is the signature header's value for body: HMAC-SHA256 with the shared secret, hex.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// SignatureHeader carries Sign(secret, body) when a secret is configured.
const SignatureHeader = "X-Berm-Signature"

// Config configures a Router.
type Config struct {
	StateDir string // the journal is StateDir/journal; the cursor StateDir/falco.cursor
	URL      string
	Secret   []byte // HMAC key; nil: requests are not signed
	Hostname string
	Registry prometheus.Registerer // nil: no metrics
	Logger   *slog.Logger
	// Queue bounds the alerts read ahead of delivery (default 256); the follower waits when it
	// is full, so the journal, not memory, holds a backlog.
	Queue int
	// Attempts bounds the tries of one alert (default 8, backoff doubling from Backoff to
	// 30 s); past it the alert is dropped and counted.
	Attempts int
	Backoff  time.Duration // default 250 ms
	Client   *http.Client  // default: 10 s timeout
	Poll     time.Duration // how often the journal is read for new alerts (default 200 ms)
}

// Router follows the journal's alerts and POSTs them.
type Router struct {
	cfg    Config
	log    *slog.Logger
	m      metrics
	cursor string
	start  cursor // where Run begins: the saved cursor, or the journal's end when New ran
}

type metrics struct {
	sent, failures prometheus.Counter
	dropped        *prometheus.CounterVec
	queued         prometheus.Gauge
}

// New checks cfg and registers the router's metrics.
func New(cfg Config) (*Router, error) {
	if cfg.URL == "" || !(strings.HasPrefix(cfg.URL, "http://") || strings.HasPrefix(cfg.URL, "https://")) {
		return nil, fmt.Errorf("alert webhook: expected an http:// or https:// URL, got %q", cfg.URL)
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 256
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = 8
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 250 * time.Millisecond
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 200 * time.Millisecond
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Router{cfg: cfg, log: cfg.Logger, cursor: filepath.Join(cfg.StateDir, "falco.cursor")}
	r.m = metrics{
		sent:     prometheus.NewCounter(prometheus.CounterOpts{Name: "berm_alert_webhook_sent_total", Help: "Alerts the webhook accepted."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "berm_alert_webhook_failures_total", Help: "Deliveries of an alert that failed and were tried again."}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "berm_alert_webhook_dropped_total",
			Help: "Alerts never delivered: the webhook refused them (rejected) or failed every attempt (undelivered)."}, []string{"reason"}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{Name: "berm_alert_webhook_queued", Help: "Alerts read from the journal and not yet delivered."}),
	}
	// With no cursor yet, delivery starts at the journal's end as of now: a webhook configured
	// on a node with history is sent what comes next, from the first call after New.
	saved, err := r.loadCursor()
	if err != nil {
		return nil, err
	}
	if saved != nil {
		r.start = *saved
	} else {
		end, err := journal.Scan(filepath.Join(cfg.StateDir, "journal"), journal.Position{}, func(journal.Record) error { return nil })
		if err != nil {
			return nil, fmt.Errorf("alert webhook: read journal: %w", err)
		}
		r.start = cursor{Pos: end.End}
	}
	if cfg.Registry != nil {
		for _, c := range []prometheus.Collector{r.m.sent, r.m.failures, r.m.dropped, r.m.queued} {
			if err := cfg.Registry.Register(c); err != nil {
				return nil, fmt.Errorf("alert webhook metrics: %w", err)
			}
		}
	}
	return r, nil
}

// cursor is where delivery resumes: the journal record holding the next alert, and how many
// of that record's alerts were delivered already.
type cursor struct {
	Pos  journal.Position `json:"pos"`
	Done int              `json:"done"`
}

type item struct {
	p   Payload
	at  cursor // the cursor once this alert is delivered
	raw []byte
}

// Run follows the journal and delivers until ctx ends.
func (r *Router) Run(ctx context.Context) error {
	q := make(chan item, r.cfg.Queue)
	errc := make(chan error, 1)
	go func() { errc <- r.follow(ctx, r.start, q) }()
	for {
		select {
		case it := <-q:
			r.m.queued.Dec()
			r.deliver(ctx, it)
			if ctx.Err() != nil {
				return nil
			}
			if err := r.saveCursor(it.at); err != nil {
				r.log.Error("alert webhook: save cursor", "err", err)
			}
		case err := <-errc:
			return err
		case <-ctx.Done():
			return nil
		}
	}
}

func (r *Router) follow(ctx context.Context, from cursor, q chan<- item) error {
	err := journal.Follow(ctx, filepath.Join(r.cfg.StateDir, "journal"), from.Pos, r.cfg.Poll, func(rec journal.Record) error {
		if rec.Type != journal.TypeEvents {
			return nil
		}
		batch, err := journal.DecodeEvents(rec.Payload)
		if err != nil {
			r.log.Warn("alert webhook: undecodable journal record skipped", "pos", rec.Pos.String(), "err", err)
			return nil
		}
		var alerts []*event.Event
		for i := range batch {
			if batch[i].Kind == event.KindAlert && batch[i].Alert != nil {
				alerts = append(alerts, &batch[i])
			}
		}
		for i, e := range alerts {
			// The cursor's record: its first Done alerts were delivered before.
			if rec.Pos == from.Pos && i < from.Done {
				continue
			}
			at := cursor{Pos: rec.Pos, Done: i + 1}
			if i == len(alerts)-1 {
				at = cursor{Pos: rec.Next}
			}
			p := FromAlert(e, r.cfg.Hostname)
			raw, err := json.Marshal(p)
			if err != nil {
				return fmt.Errorf("alert webhook: encode %s: %w", e.ID(), err)
			}
			r.m.queued.Inc()
			select {
			case q <- item{p: p, at: at, raw: raw}:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("alert webhook: read journal: %w", err)
	}
	return nil
}

// deliver POSTs one alert, again with backoff while the receiver fails, until it is taken,
// refused for good (a 4xx other than 408 and 429) or out of attempts.
func (r *Router) deliver(ctx context.Context, it item) {
	wait := r.cfg.Backoff
	for attempt := 1; ; attempt++ {
		status, err := r.post(ctx, it.raw)
		switch {
		case err == nil && status < 300:
			r.m.sent.Inc()
			return
		case err == nil && status >= 400 && status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests:
			r.m.dropped.WithLabelValues("rejected").Inc()
			r.log.Error("alert webhook refused an alert", "rule", it.p.Rule, "call_id", it.p.OutputFields["berm.call.id"], "status", status)
			return
		}
		if ctx.Err() != nil {
			return
		}
		r.m.failures.Inc()
		if attempt >= r.cfg.Attempts {
			r.m.dropped.WithLabelValues("undelivered").Inc()
			r.log.Error("alert webhook: alert dropped after every attempt failed", "rule", it.p.Rule, "call_id", it.p.OutputFields["berm.call.id"], "attempts", attempt, "status", status, "err", err)
			return
		}
		r.log.Warn("alert webhook: delivery failed, trying again", "attempt", attempt, "in", wait, "status", status, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

func (r *Router) post(ctx context.Context, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "berm")
	if r.cfg.Secret != nil {
		req.Header.Set(SignatureHeader, Sign(r.cfg.Secret, body))
	}
	resp, err := r.cfg.Client.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode, nil
}

func (r *Router) loadCursor() (*cursor, error) {
	b, err := os.ReadFile(r.cursor)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("alert webhook: read cursor: %w", err)
	}
	var c cursor
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("alert webhook: cursor %s: %w", r.cursor, err)
	}
	return &c, nil
}

// saveCursor writes the cursor whole or not at all (a new file renamed over the old).
func (r *Router) saveCursor(c cursor) error {
	b, _ := json.Marshal(c)
	tmp := r.cursor + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, r.cursor)
}
