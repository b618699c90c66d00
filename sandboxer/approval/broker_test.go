package approval

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	rootutil "github.com/bermsec/berm/testenv/testutil"
)

func newBroker(t *testing.T, cfg Config) *Broker {
	t.Helper()
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// waitPending waits until b holds n requests.
func waitPending(t *testing.T, b *Broker, n int) []Request {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if l := b.List(); len(l) == n {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pending, want %d", len(b.List()), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestBrokerOutcomes(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := newBroker(t, Config{Registry: reg})
	for _, tc := range []struct {
		name   string
		decide func(b *Broker, id string, abandon chan struct{})
		want   string
	}{
		{"approve", func(b *Broker, id string, _ chan struct{}) { b.Decide(id, true, "alice", ChannelAPI, "ok") }, Approved},
		{"deny", func(b *Broker, id string, _ chan struct{}) { b.Decide(id, false, "bob", ChannelAPI, "no") }, Denied},
		{"timeout", func(*Broker, string, chan struct{}) {}, Timeout},
		{"ended", func(_ *Broker, _ string, abandon chan struct{}) { close(abandon) }, Ended},
	} {
		t.Run(tc.name, func(t *testing.T) {
			abandon := make(chan struct{})
			got := make(chan Decision, 1)
			timeout := time.Minute
			if tc.want == Timeout {
				timeout = 50 * time.Millisecond
			}
			go func() { got <- b.Ask(&Request{CallID: "c", Object: "/ws/x"}, timeout, abandon) }()
			p := waitPending(t, b, 1)
			tc.decide(b, p[0].ID, abandon)
			d := <-got
			if d.Outcome != tc.want || d.Latency <= 0 {
				t.Fatalf("decision %+v", d)
			}
			if len(b.List()) != 0 {
				t.Fatal("still pending after its decision")
			}
			if err := b.Decide(p[0].ID, true, "late", ChannelAPI, ""); err != ErrUnknown {
				t.Fatalf("a second decision: %v", err)
			}
		})
	}
	for outcome, want := range map[string]float64{Approved: 1, Denied: 1, Timeout: 1, Ended: 1} {
		if v := testutil.ToFloat64(b.metrics.decisions.WithLabelValues(outcome)); v != want {
			t.Errorf("decisions{%s} = %v", outcome, v)
		}
	}
	// Both decisions by a person came within milliseconds: all quick.
	if got := testutil.ToFloat64(b.metrics.byPerson); got != 2 || b.metrics.share() != 1 {
		t.Errorf("person decisions %v, quick share %v", got, b.metrics.share())
	}
	n, err := testutil.GatherAndCount(reg, "berm_approvals_pending", "berm_approval_quick_share", "berm_approval_decision_seconds")
	if err != nil || n != 3 {
		t.Fatalf("metrics: %d, %v", n, err)
	}
}

// The API over a real HTTP server on loopback: the bearer token is required, the list shows
// the pending request, a decision ends it, an unknown id is 404.
func TestAPI(t *testing.T) {
	b := newBroker(t, Config{})
	srv := httptest.NewServer(Handler(b, "sekret-token-0123456789"))
	defer srv.Close()
	got := make(chan Decision, 1)
	go func() {
		got <- b.Ask(&Request{CallID: "c1", Tenant: "t", Action: "unlink", Object: "/ws/reports/a", Rule: "r"}, time.Minute, nil)
	}()
	waitPending(t, b, 1)
	do := func(method, path, token string, body any) *http.Response {
		var rd io.Reader
		if body != nil {
			data, _ := json.Marshal(body)
			rd = bytes.NewReader(data)
		}
		req, _ := http.NewRequest(method, srv.URL+path, rd)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, tok := range []string{"", "wrong"} {
		if r := do("GET", "/v1/approvals", tok, nil); r.StatusCode != http.StatusUnauthorized {
			t.Fatalf("token %q: %s", tok, r.Status)
		}
	}
	r := do("GET", "/v1/approvals", "sekret-token-0123456789", nil)
	var list []PendingView
	json.NewDecoder(r.Body).Decode(&list)
	if len(list) != 1 || list[0].CallID != "c1" || list[0].Object != "/ws/reports/a" || list[0].AgeSeconds <= 0 {
		t.Fatalf("list %+v", list)
	}
	if r := do("POST", "/v1/approvals/nope", "sekret-token-0123456789", DecideBody{Decision: "approve"}); r.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown id: %s", r.Status)
	}
	if r := do("POST", "/v1/approvals/"+list[0].ID, "sekret-token-0123456789", DecideBody{Decision: "maybe"}); r.StatusCode != http.StatusBadRequest {
		t.Fatalf("bad decision: %s", r.Status)
	}
	if r := do("POST", "/v1/approvals/"+list[0].ID, "sekret-token-0123456789", DecideBody{Decision: "deny", Reason: "nope", By: "carol"}); r.StatusCode != http.StatusNoContent {
		t.Fatalf("decide: %s", r.Status)
	}
	if d := <-got; d.Outcome != Denied || d.By != "carol" || d.Reason != "nope" || d.Channel != ChannelAPI {
		t.Fatalf("decision %+v", d)
	}
}

// The webhook posts the request to a real receiver on loopback, signed over timestamp.body;
// a changed body or timestamp does not verify.
func TestWebhookSignature(t *testing.T) {
	secret := []byte("webhook-secret")
	type got struct {
		body    []byte
		ts, sig string
	}
	ch := make(chan got, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("content type %q", r.Header.Get("Content-Type"))
		}
		ch <- got{body, r.Header.Get("X-Berm-Timestamp"), r.Header.Get("X-Berm-Signature")}
	}))
	defer srv.Close()
	b := newBroker(t, Config{Webhook: &Webhook{URL: srv.URL, Secret: secret}})
	go b.Ask(&Request{CallID: "c1", Tenant: "acme", Tool: "cleanup", Action: "unlink", Object: "/ws/reports/a", Rule: "delete-reports"}, time.Minute, nil)
	var g got
	select {
	case g = <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no webhook request")
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(g.ts + "." + string(g.body)))
	if want := "sha256=" + hex.EncodeToString(mac.Sum(nil)); g.sig != want {
		t.Fatalf("signature %q, want %q", g.sig, want)
	}
	if !VerifySignature(secret, g.ts, g.body, g.sig) || VerifySignature(secret, g.ts, append(g.body, ' '), g.sig) || VerifySignature(secret, g.ts+"1", g.body, g.sig) {
		t.Fatal("VerifySignature accepts a changed request or refuses the real one")
	}
	var body WebhookBody
	if err := json.Unmarshal(g.body, &body); err != nil || body.Type != "approval.request" || body.Request.Tenant != "acme" || body.Request.ID == "" {
		t.Fatalf("body %s: %v", g.body, err)
	}
	p := waitPending(t, b, 1)
	b.Decide(p[0].ID, false, "t", ChannelAPI, "")
}

// The token file is made root-only; one others can read is refused.
func TestTokenFile(t *testing.T) {
	rootutil.RequireRoot(t, "the token file must be root's")
	p := filepath.Join(t.TempDir(), "sub", "token")
	tok, err := LoadToken(p)
	if err != nil || len(tok) != 64 {
		t.Fatalf("%q %v", tok, err)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode())
	}
	if again, _ := LoadToken(p); again != tok {
		t.Fatal("a second load made a new token")
	}
	os.Chmod(p, 0o644)
	if _, err := ReadToken(p); err == nil || !strings.Contains(err.Error(), "0600") {
		t.Fatalf("a readable token was accepted: %v", err)
	}
}
