package falco

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bermsec/berm/agent/event"
	"github.com/bermsec/berm/agent/journal"
)

func alert(key string, seq uint64, rule, severity, output string) event.Event {
	return event.Event{CallID: "id-" + key, CallKey: key, Tenant: "acme", Tool: "shell", Seq: seq, Kind: event.KindAlert,
		Time: time.Unix(1700000000, int64(seq)), PID: 42, Exe: "/usr/bin/cat",
		Alert: &event.Alert{RuleID: rule, Title: "T " + rule, Severity: severity, Surface: "credential", Technique: []string{"T1003.008"}, Output: output, EventSeq: seq - 1}}
}

// The payload has every field Falco's JSON output has, with the values falcosidekick reads.
func TestFromAlertIsFalcosShape(t *testing.T) {
	e := alert("k1", 7, "credential-system-files", "high", "/usr/bin/cat opened /etc/shadow -> EACCES")
	b, err := json.Marshal(FromAlert(&e, "node-a"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"uuid", "output", "priority", "rule", "time", "source", "output_fields", "hostname", "tags"} {
		if _, ok := m[f]; !ok {
			t.Errorf("no %q in %s", f, b)
		}
	}
	if m["priority"] != "Error" || m["rule"] != "credential-system-files" || m["hostname"] != "node-a" || m["source"] != "berm" {
		t.Errorf("payload %s", b)
	}
	if _, err := time.Parse(time.RFC3339Nano, m["time"].(string)); err != nil {
		t.Errorf("time %v: %v", m["time"], err)
	}
	of := m["output_fields"].(map[string]any)
	if of["berm.call.id"] != "id-k1" || of["berm.tenant"] != "acme" || of["berm.tool"] != "shell" || of["k8s.ns.name"] != "acme" || of["proc.exepath"] != "/usr/bin/cat" {
		t.Errorf("output_fields %v", of)
	}
	if !strings.Contains(m["output"].(string), "call=id-k1") {
		t.Errorf("output %q does not name the call", m["output"])
	}
}

func TestPriorityOfEachSeverity(t *testing.T) {
	for sev, want := range map[string]string{"critical": "Critical", "high": "Error", "medium": "Warning", "low": "Notice", "info": "Informational", "": "Informational"} {
		if got := Priority(sev); got != want {
			t.Errorf("Priority(%q) = %q, want %q", sev, got, want)
		}
	}
}

// A file name a tool chose cannot draw in the receiver's terminal or chat: the output and the
// rule are printable ASCII, every other byte escaped; the exact name stays in output_fields.
func TestFromAlertEscapesWhatTheToolWrote(t *testing.T) {
	e := alert("k1", 2, "r\x1b[2K", "low", "opened /w/customers.db\x1b[12D\x1b[Kcache.tmp\n\u202e")
	p := FromAlert(&e, "n")
	for _, s := range []string{p.Output, p.Rule} {
		for _, c := range []byte(s) {
			if c < 0x20 || c >= 0x7f {
				t.Fatalf("byte %#x in %q", c, s)
			}
		}
	}
	if !strings.Contains(p.Output, `customers.db\x1b[12D\x1b[Kcache.tmp\n\u202e`) {
		t.Errorf("output %q does not show the escapes", p.Output)
	}
}

func TestUUIDIsStablePerAlert(t *testing.T) {
	a, b := alert("k1", 2, "r", "low", ""), alert("k1", 3, "r", "low", "")
	if uuidOf(&a) != uuidOf(&a) || uuidOf(&a) == uuidOf(&b) {
		t.Fatalf("uuids %s %s", uuidOf(&a), uuidOf(&b))
	}
}

// receiver is a real HTTP server that fails its first failFirst requests with 503.
type receiver struct {
	mu        sync.Mutex
	failFirst int
	status    int // after the failures (0: 200)
	got       []Payload
	sigs      []string
	bodies    [][]byte
	n         int
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.n++
	if rc.n <= rc.failFirst {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if rc.status != 0 {
		w.WriteHeader(rc.status)
		return
	}
	var p Payload
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	rc.got, rc.sigs, rc.bodies = append(rc.got, p), append(rc.sigs, r.Header.Get(SignatureHeader)), append(rc.bodies, b)
}

func (rc *receiver) delivered() []Payload {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]Payload(nil), rc.got...)
}

func startRouter(t *testing.T, state, url string, reg *prometheus.Registry) (*Router, func()) {
	t.Helper()
	r, err := New(Config{StateDir: state, URL: url, Secret: []byte("k"), Hostname: "n", Registry: reg,
		Logger: slog.New(slog.DiscardHandler), Backoff: 10 * time.Millisecond, Attempts: 5, Poll: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	return r, func() { cancel(); <-done }
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not in 30 s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Alerts written while the receiver fails reach it once it recovers, each once, in order,
// signed; after a restart of the router, only what came since is sent.
func TestRouterDeliversThroughFailureAndRestart(t *testing.T) {
	state := t.TempDir()
	w, err := journal.OpenWriter(state + "/journal")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// History before the router: not sent.
	if err := w.AppendEvents([]event.Event{alert("old", 2, "r0", "low", "")}); err != nil {
		t.Fatal(err)
	}
	rc := &receiver{failFirst: 3}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	reg := prometheus.NewRegistry()
	r, stop := startRouter(t, state, srv.URL, reg)
	other := event.Event{CallID: "x", CallKey: "k", Seq: 1, Kind: event.KindExec, Exec: &event.Exec{Filename: "/bin/true"}}
	if err := w.AppendEvents([]event.Event{other, alert("a", 2, "r1", "high", "one"), alert("a", 3, "r2", "low", "two")}); err != nil {
		t.Fatal(err)
	}
	if err := w.AppendEvents([]event.Event{alert("b", 2, "r3", "medium", "three")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "three alerts delivered", func() bool { return len(rc.delivered()) >= 3 })
	stop()
	got := rc.delivered()
	if len(got) != 3 || got[0].Rule != "r1" || got[1].Rule != "r2" || got[2].Rule != "r3" {
		t.Fatalf("delivered %v, want r1 r2 r3 once each", rules(got))
	}
	for i, b := range rc.bodies {
		if rc.sigs[i] != Sign([]byte("k"), b) {
			t.Errorf("alert %d: signature %q does not verify", i, rc.sigs[i])
		}
	}
	if v := testutil.ToFloat64(r.m.failures); v != 3 {
		t.Errorf("failures %v, want 3", v)
	}
	if v := testutil.ToFloat64(r.m.sent); v != 3 {
		t.Errorf("sent %v, want 3", v)
	}

	// Restarted: the cursor says where it was.
	if err := w.AppendEvents([]event.Event{alert("c", 2, "r4", "low", "four")}); err != nil {
		t.Fatal(err)
	}
	_, stop = startRouter(t, state, srv.URL, prometheus.NewRegistry())
	defer stop()
	waitFor(t, "the fourth alert delivered", func() bool { return len(rc.delivered()) >= 4 })
	time.Sleep(100 * time.Millisecond)
	if got := rc.delivered(); len(got) != 4 || got[3].Rule != "r4" {
		t.Fatalf("after a restart: %v, want r1 r2 r3 r4", rules(got))
	}
}

// A receiver that refuses an alert (400) or never recovers: the alert is dropped and counted
// by reason, and the ones after it still go.
func TestRouterCountsWhatItDrops(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rc     *receiver
		reason string
	}{
		{"refused", &receiver{status: http.StatusBadRequest}, "rejected"},
		{"never recovers", &receiver{failFirst: 1 << 30}, "undelivered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			w, err := journal.OpenWriter(state + "/journal")
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			srv := httptest.NewServer(tc.rc)
			defer srv.Close()
			r, stop := startRouter(t, state, srv.URL, prometheus.NewRegistry())
			defer stop()
			if err := w.AppendEvents([]event.Event{alert("a", 2, "r1", "high", ""), alert("a", 3, "r2", "high", "")}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "two alerts dropped", func() bool { return testutil.ToFloat64(r.m.dropped.WithLabelValues(tc.reason)) == 2 })
		})
	}
}

func rules(ps []Payload) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Rule)
	}
	return out
}
